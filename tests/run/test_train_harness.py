"""`configs/train-harness.yaml` as shipped: it loads, its warm start plays gold THROUGH mini-swe-agent
(the demonstration holds the harness's own prompt, the gold tool calls are the only trained
tokens), the episode fits the learner's ``max_tokens``, and a GRPO step trains on it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

from gymfleet.envs.harness.harnesses import gold_replies
from gymfleet.envs.registry import make_agent_env
from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.run.config import load_train_config
from gymfleet.run.demonstrations import load_demonstrations, record_demonstrations
from gymfleet.trainer import AdapterBucket, Learner
from gymfleet.trainer.batch import collate
from tests.trainer.test_learner import MemoryGroupSource

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.bwrap, pytest.mark.model, pytest.mark.timeout(900)]


async def test_the_harness_configs_warm_start_plays_gold_through_mini_swe_agent_and_trains(
        tmp_path: Path, bwrap_available: bool, smollm_tokenizer: Any) -> None:
    cfg = load_train_config(ROOT / "configs" / "train-harness.yaml", [
        f"store={tmp_path}/store.db", f"metrics_path={tmp_path}/m.jsonl", f"bucket={tmp_path}/bucket",
        "learner.objective=none",  # forced tokens carry logprob 0: no importance ratio to take
    ])
    (task,) = cfg.run.tasks
    assert (task.env_id, task.env_kwargs["harness"]) == ("gymfleet/Harness-v0", "mini-swe-agent-text")
    recording = await record_demonstrations(cfg.run, smollm_tokenizer, 1, max_instances_per_task=1)
    assert (recording.by_status, recording.n_solved) == ({"ok": 1}, 1)
    async with await TrajectoryStore.open(cfg.run.store) as store:
        (demo,) = await load_demonstrations(store, cfg.run.run_id)
    instance = task.instances[0]
    gold = gold_replies("mini-swe-agent-text", make_agent_env("gymfleet/TerminalEasy-v0").gold_policy(instance).actions)
    forced = [smollm_tokenizer.encode(r, add_special_tokens=False) + [smollm_tokenizer.eos_token_id] for r in gold]
    # the gateway's tokens: only the gold replies are trained on; the prompt is mini-swe-agent's own
    assert demo.token_ids[demo.loss_mask == 1].tolist() == [t for ids in forced for t in ids]
    assert (demo.metrics["calls"], demo.metrics["continued"], demo.metrics["harness_exit"]) == (2, 1, "Submitted")
    prompt = smollm_tokenizer.decode(demo.token_ids[: demo.loss_mask.nonzero()[0][0]].tolist())
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in prompt and "mswea_bash_command" in prompt
    # the config's harness_config: mini_textbased.yaml's system prompt and submit command, its own
    # 3-line instance template
    assert task.env_kwargs["harness_config"] == ["configs/harness/mini-text-terminal.yaml"]
    assert "Failure to follow these rules will cause your response to be rejected" in prompt  # its system prompt
    assert "Reply with one ```mswea_bash_command block" in prompt and "Recommended Workflow" not in prompt
    assert demo.n_tokens <= cfg.learner.max_tokens  # the whole episode is trained, never cut
    # a GRPO step on a group of this harness episode (reward 1) and a failed one (reward 0)
    failed = copy.deepcopy(demo)
    failed.rollout_id, failed.reward = failed.rollout_id + "-b", 0.0
    # its last 3 target tokens off the mask: two identical samples with advantages +1 and -1 have a
    # gradient of exactly 0, whether they share a micro-batch or not
    failed.loss_mask = failed.loss_mask.copy()
    failed.loss_mask[failed.loss_mask.nonzero()[0][-3:]] = 0
    batch = collate([[demo, failed]], cfg.learner.max_tokens)
    assert batch.advantages.tolist() == pytest.approx([1.0, -1.0], abs=1e-3)
    learner = Learner(cfg.learner.model_copy(update={"lora_rank": 1}), cfg.rollout_policy(), MemoryGroupSource({}),
                      AdapterBucket(str(tmp_path / "bucket"), cfg.run.run_id))
    before = [p.detach().clone() for p in learner.model.parameters() if p.requires_grad]
    metrics = learner.train_batch(batch, 1)
    after = [p for p in learner.model.parameters() if p.requires_grad]
    assert torch.isfinite(torch.tensor(metrics.loss)) and metrics.grad_norm > 0
    assert metrics.n_tokens == demo.n_generated_tokens + failed.n_generated_tokens == 2 * demo.n_generated_tokens - 3
    assert any(not torch.equal(a, b) for a, b in zip(after, before))

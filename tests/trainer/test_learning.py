"""Does training help? Mean reward on held-out MiniWoB click-test-2 pages, before and after.

Why click-test-2: one turn suffices (two buttons, "ONE" and "TWO"; the page text names which to
press), the action language is tiny (``click(id)``), and the untrained SmolLM2-135M already
succeeds sometimes: it often answers with a well-formed ``click(N)`` whose id is the right
button's about half the time. So GRPO groups disagree (non-zero advantages) from step 0, which
is what a few CPU steps need to move anything.

Held-out pages: the orchestrator resets the env without a seed, so every rollout gets a fresh
random page (which button says ONE, where they are); the untrained and the trained adapter are
each evaluated on 2 x HELDOUT such pages with the same sampling seeds (same rollout ids). The gain over
a few steps on CPU is not robust enough to assert (see the numbers printed, and the report of
the branch that added this test); the test asserts the measurement itself: both evaluations
ran every held-out page, the trained adapter is a published bucket version, and rewards are in
[0, 1]. Set GYMFLEET_LEARNING_STEPS / GYMFLEET_LEARNING_HELDOUT for a bigger run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gymfleet.orchestrator.config import TaskConfig
from gymfleet.trainer.bucket import AdapterBucket
from gymfleet.trainer.config import train_config_from_dict
from gymfleet.trainer.evaluate import evaluate
from gymfleet.trainer.job import train

pytestmark = [pytest.mark.model, pytest.mark.browser, pytest.mark.slow]

STEPS = int(os.environ.get("GYMFLEET_LEARNING_STEPS", "6"))
HELDOUT = int(os.environ.get("GYMFLEET_LEARNING_HELDOUT", "16"))
TASK = {"name": "click", "env_id": "gymfleet/miniwob.click-test-2-v0", "max_turns": 1, "turn_timeout_s": 120,
        "sampling": {"temperature": 1.0, "max_new_tokens": 12}}


async def test_training_on_click_test_2_vs_untrained_on_held_out_pages(tmp_path: Path, chromium_path: str) -> None:
    heldout = ["click-test-2"]
    task = TaskConfig.model_validate(TASK)
    before = await evaluate(task, heldout, tmp_path, name="untrained", samples_per_instance=2 * HELDOUT)

    cfg = train_config_from_dict({
        "run_id": "learn", "store": str(tmp_path / "train.db"), "metrics_path": str(tmp_path / "m.jsonl"),
        "bucket": str(tmp_path / "bucket"), "report_dir": str(tmp_path / "report"), "max_in_flight": 8,
        "mode": "async", "learner_threads": 1, "budget": {"max_steps": STEPS},
        "learner": {"lora_rank": 8, "lora_alpha": 16, "learning_rate": 1e-3, "groups_per_step": 2,
                    "micro_batch_size": 8, "max_tokens": 1024, "max_staleness": 2},
        "tasks": [{**TASK, "instances": ["click-test-2"], "group_size": 4}],
    })
    outcome = await train(cfg, live=False)
    assert outcome.learner_exitcode == 0 and outcome.report["last_step"] == STEPS
    latest = AdapterBucket(cfg.bucket, "learn").latest()
    assert latest is not None and latest.version == STEPS

    after = await evaluate(task, heldout, tmp_path, name="trained", adapter=latest.url, samples_per_instance=2 * HELDOUT)
    print(f"click-test-2 held-out mean reward: untrained {before.mean_reward:.3f} (n={before.n_rollouts}), "
          f"after {STEPS} steps {after.mean_reward:.3f} (n={after.n_rollouts}); "
          f"training rewards by step {[s['mean_reward'] for s in outcome.report['steps']]}")
    assert before.n_rollouts == after.n_rollouts == 2 * HELDOUT
    assert 0.0 <= before.mean_reward <= 1.0 and 0.0 <= after.mean_reward <= 1.0

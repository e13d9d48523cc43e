"""Shareable adapter versions (real embedded model, real learner, engine and bucket): a published
version names the base model by hub id and carries a model card; an exported version carries the
base it was trained on (the de-quantised GGUF, whose weights differ from the hub's) and loads as
its card says, ``PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(DIR / "base"), DIR)``,
in a Python that cannot import gymfleet, offline, with an empty Hugging Face cache: the same
logits as the learner's model and the same logprobs as the engine serving that export."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

from gymfleet.core.models import EMBEDDED_HUB_ID, ModelSpec, hub_id, resolve_model_dir
from gymfleet.core.records import Generation, SamplingParams
from gymfleet.orchestrator.engines.config import TransformersEngineConfig
from gymfleet.orchestrator.engines.transformers_engine import TransformersEngine
from gymfleet.trainer import AdapterBucket, Learner, LearnerConfig, RolloutPolicy, export_version
from gymfleet.core.errors import TrainError
from tests.trainer.test_learner import MemoryGroupSource

pytestmark = pytest.mark.model

CONFIG = LearnerConfig(lora_rank=2, lora_alpha=8, groups_per_step=1, micro_batch_size=1,
                       target_modules=["q_proj", "v_proj"])
INPUT_IDS = [[1, 504, 3458, 282, 4153, 314, 216, 28]]

CLEAN_LOAD = """
import importlib.util, json, sys
sys.path.append(sys.argv[1])  # the venv's site-packages, without its .pth files (gymfleet's editable hook)
assert importlib.util.find_spec("gymfleet") is None, "gymfleet must not be importable here"
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM
from pathlib import Path
folder = Path(sys.argv[2])
base_id = json.load(open(folder / "adapter_config.json"))["base_model_name_or_path"]
base = AutoModelForCausalLM.from_pretrained(folder / "base")  # as the card's snippet
model = PeftModel.from_pretrained(base, folder).eval()
ids, n = torch.tensor(json.loads(sys.argv[3])), int(sys.argv[4])  # prompt + answer, prompt length
with torch.no_grad():
    adapted = model(input_ids=ids).logits[0]
    with model.disable_adapter():
        plain = model(input_ids=ids).logits[0, n - 1]
answer = [torch.log_softmax(adapted[n - 1 + i].float(), -1)[t].item() for i, t in enumerate(ids[0, n:].tolist())]
print(json.dumps({"base": base_id, "adapted": adapted[n - 1, :64].tolist(), "plain": plain[:64].tolist(),
                  "answer_logprobs": answer}))
"""


def test_hub_id_names_the_embedded_model_and_keeps_other_names() -> None:
    assert hub_id(ModelSpec()) == EMBEDDED_HUB_ID
    assert hub_id(ModelSpec(name_or_path="Qwen/Qwen3-0.6B")) == "Qwen/Qwen3-0.6B"
    assert hub_id(ModelSpec(name_or_path=resolve_model_dir(ModelSpec()))).startswith("/")  # no hub id recorded


async def test_a_published_version_is_shareable_and_its_export_loads_without_gymfleet(tmp_path: Path) -> None:
    bucket = AdapterBucket(str(tmp_path / "bucket"), "share")
    learner = Learner(CONFIG, RolloutPolicy(), MemoryGroupSource({}), bucket)
    torch.manual_seed(3)
    with torch.no_grad():  # a non-trivial adapter (lora_B starts at zero)
        for name, p in learner.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    learner.step, learner.recent_rewards = 7, {6: 0.25, 7: 0.5}
    assert await learner.publish() == 1

    published = tmp_path / "bucket" / "share" / "adapters" / "v000001"
    assert json.loads((published / "adapter_config.json").read_text())["base_model_name_or_path"] == EMBEDDED_HUB_ID
    card = (published / "README.md").read_text()
    assert f"base_model: {EMBEDDED_HUB_ID}" in card and "library_name: peft" in card
    assert "# share v000001" in card and "learner step: 7" in card and "| 7 | 0.500 |" in card
    assert "lora_rank: 2" in card and "Not known when this version was written" in card
    assert "README.md" in json.loads((published / "meta.json").read_text())["files"]

    heldout = {"policies": [{"name": "base", "version": 0}, {"name": "final", "version": 1}],
               "by_family": {"echo": {"base": {"pass_at_1": 0.25, "se": 0.15, "n": 8},
                                      "final": {"pass_at_1": 0.75, "se": 0.15, "n": 8}}},
               "gains": {"echo": {"final_vs_base": {"delta": 0.5, "se": 0.21}}}}
    out = export_version(bucket, 1, tmp_path / "export", heldout)
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "adapter_config.json", "adapter_model.safetensors", "base"]
    card = (out / "README.md").read_text()
    assert "| echo | final | 0.750 | 0.150 | 8 |" in card and "| echo | final_vs_base | 0.500 | 0.210 |" in card
    assert "Policies: base (v0), final (v1)." in card
    with pytest.raises(TrainError, match="not an empty folder"):
        export_version(bucket, 1, out)

    with torch.no_grad():
        expected = learner.model.eval()(input_ids=torch.tensor(INPUT_IDS)).logits[0, -1, :64]
    assert (out / "base" / "model.safetensors").is_file()
    assert 'base = AutoModelForCausalLM.from_pretrained(folder / "base")' in card and "Q4_1" in card
    served = await _engine_generation(out)  # the engine serving the export: its logprobs for one prompt
    site = sysconfig.get_paths()["purelib"]
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "HF_HOME": str(tmp_path / "hf"),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    prompt_and_answer = [INPUT_IDS[0] + served.token_ids]
    done = subprocess.run([sys.executable, "-I", "-S", "-c", CLEAN_LOAD, site, str(out), json.dumps(prompt_and_answer),
                           str(len(INPUT_IDS[0]))], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["base"] == "base"  # adapter_config names the base it was trained on, which the folder holds
    assert got["answer_logprobs"] == pytest.approx(served.logprobs, abs=1e-3)  # the engine's policy, to 1e-3
    assert torch.allclose(torch.tensor(got["adapted"]), expected, atol=1e-3)  # the trained adapter, applied
    assert not torch.allclose(torch.tensor(got["plain"]), expected, atol=1e-3)  # and it changes the output


async def _engine_generation(adapter: Path) -> Generation:
    """Three tokens of INPUT_IDS sampled at temperature 1 by the in-process engine with ``adapter`` loaded."""
    async with TransformersEngine(TransformersEngineConfig()) as engine:
        await engine.load_adapter("v1", str(adapter))
        return await engine.generate(INPUT_IDS[0], SamplingParams(temperature=1.0, max_new_tokens=3, seed=0),
                                     adapter="v1")

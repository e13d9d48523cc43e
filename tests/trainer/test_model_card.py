"""Shareable adapter versions (real embedded model, real learner and bucket): a published version
names the base model by hub id and carries a model card; an exported version loads with
``PeftModel.from_pretrained(base, DIR)`` in a Python that cannot import gymfleet, offline, the
base model found by its hub id in a Hugging Face cache (what a clean machine that downloaded
it once has)."""

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
from gymfleet.trainer import AdapterBucket, Learner, LearnerConfig, RolloutPolicy, export_version
from gymfleet.trainer.errors import TrainError
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
folder = sys.argv[2]
base_id = json.load(open(folder + "/adapter_config.json"))["base_model_name_or_path"]
base = AutoModelForCausalLM.from_pretrained(base_id, dtype=torch.float32)
model = PeftModel.from_pretrained(base, folder).eval()
ids = torch.tensor(json.loads(sys.argv[3]))
with torch.no_grad():
    adapted = model(input_ids=ids).logits[0, -1]
    with model.disable_adapter():
        plain = model(input_ids=ids).logits[0, -1]
print(json.dumps({"base": base_id, "adapted": adapted[:64].tolist(), "plain": plain[:64].tolist()}))
"""


def test_hub_id_names_the_embedded_model_and_keeps_other_names() -> None:
    assert hub_id(ModelSpec()) == EMBEDDED_HUB_ID
    assert hub_id(ModelSpec(name_or_path="Qwen/Qwen3-0.6B")) == "Qwen/Qwen3-0.6B"
    assert hub_id(ModelSpec(name_or_path=resolve_model_dir(ModelSpec()))).startswith("/")  # no hub id recorded


def _seed_hf_cache(hf_home: Path) -> None:
    """An HF hub cache holding the embedded model under its hub id (the de-quantised weights)."""
    repo = hf_home / "hub" / f"models--{EMBEDDED_HUB_ID.replace('/', '--')}"
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    for f in Path(resolve_model_dir(ModelSpec())).iterdir():
        (snapshot / f.name).symlink_to(f)


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
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "adapter_config.json", "adapter_model.safetensors"]
    card = (out / "README.md").read_text()
    assert "| echo | final | 0.750 | 0.150 | 8 |" in card and "| echo | final_vs_base | 0.500 | 0.210 |" in card
    assert "Policies: base (v0), final (v1)." in card
    with pytest.raises(TrainError, match="not an empty folder"):
        export_version(bucket, 1, out)

    with torch.no_grad():
        expected = learner.model.eval()(input_ids=torch.tensor(INPUT_IDS)).logits[0, -1, :64]
    _seed_hf_cache(tmp_path / "hf")
    site = sysconfig.get_paths()["purelib"]
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "HF_HOME": str(tmp_path / "hf"),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-I", "-S", "-c", CLEAN_LOAD, site, str(out), json.dumps(INPUT_IDS)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["base"] == EMBEDDED_HUB_ID
    assert torch.allclose(torch.tensor(got["adapted"]), expected, atol=1e-3)  # the trained adapter, applied
    assert not torch.allclose(torch.tensor(got["plain"]), expected, atol=1e-3)  # and it changes the output

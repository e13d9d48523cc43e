"""The cached de-quantised copy of the embedded GGUF model is the same model."""

from __future__ import annotations

import pytest

from gymfleet.core.models import (
    ModelError,
    ModelSpec,
    embedded_model_spec,
    load_causal_lm,
    resolve_device,
    resolve_model_dir,
)


@pytest.mark.model
@pytest.mark.slow
def test_cached_copy_gives_identical_logits() -> None:
    import torch
    from transformers import AutoModelForCausalLM

    spec = embedded_model_spec()
    direct = AutoModelForCausalLM.from_pretrained(spec.name_or_path, gguf_file=spec.gguf_file).eval()
    cached = load_causal_lm()
    ids = torch.tensor([[1, 28120, 905, 314, 253]])
    with torch.no_grad():
        assert torch.equal(direct(ids).logits, cached(ids).logits)
    assert resolve_model_dir(ModelSpec()) == resolve_model_dir(ModelSpec())


def test_missing_gguf_names_the_file(tmp_path) -> None:
    with pytest.raises(ModelError, match="GGUF file not found"):
        resolve_model_dir(ModelSpec(name_or_path=str(tmp_path), gguf_file="nope.gguf"))


def test_the_device_is_a_gpu_when_torch_sees_one_and_a_clear_error_when_asked_for_one_that_is_not_there() -> None:
    import torch

    gpu = torch.cuda.is_available()
    assert resolve_device("auto") == ("cuda" if gpu else "cpu")
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(ModelError, match="use auto, cpu, cuda or cuda:N"):
        resolve_device("tpu")
    if not gpu:
        with pytest.raises(ModelError, match="sees no CUDA GPU here; set model.device: auto"):
            resolve_device("cuda:0")
    assert ModelSpec(device="cpu").same_weights(ModelSpec())



@pytest.mark.model
def test_the_embedded_models_hub_id_loads_offline_from_the_hf_cache_or_the_embedded_package(tmp_path) -> None:
    """What a published adapter names as its base (the hub id) loads inside gymfleet without a
    hub: from the Hugging Face cache when that holds it, else from the embedded package."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from gymfleet.core.models import EMBEDDED_HUB_ID, ModelSpec, resolve_model_dir

    embedded = resolve_model_dir(ModelSpec())
    probe = ("import json; from gymfleet.core.models import ModelSpec, resolve_model_dir; "
             f"print(json.dumps(resolve_model_dir(ModelSpec(name_or_path={EMBEDDED_HUB_ID!r}))))")

    def resolved(hf_home: Path) -> str:
        env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
        env.pop("HF_HUB_CACHE", None)
        done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert resolved(tmp_path / "empty") == embedded
    snapshot = tmp_path / "hf" / "hub" / f"models--{EMBEDDED_HUB_ID.replace('/', '--')}" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    (snapshot / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert resolved(tmp_path / "hf") == EMBEDDED_HUB_ID  # transformers then finds it in that cache

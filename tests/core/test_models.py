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


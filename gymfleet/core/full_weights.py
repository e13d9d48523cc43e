"""Full-weight versions: a model's weights copied in place from a folder's ``model.safetensors``.

A learner that trains every weight (``learner.adapter: none``) publishes a transformers folder
(``config.json``, ``model.safetensors``); the learner resuming from one and the in-process engine
serving one both load it here, so the two agree on what fits.
"""

from __future__ import annotations

from pathlib import Path

import torch

FULL_WEIGHTS_FILE = "model.safetensors"
"""The file a full-weight version holds its weights in (transformers' name, one shard)."""


def load_full_weights(model: torch.nn.Module, folder: Path) -> None:
    """Copies ``folder/model.safetensors`` into ``model``'s parameters in place (cast to their dtype).

    Tied parameters (SmolLM2's ``lm_head.weight`` is its input embedding) are saved once and
    loaded through the one they are tied to. Nothing is copied unless every tensor fits.

    Raises:
        FileNotFoundError: no ``model.safetensors`` in ``folder``.
        ValueError: the file does not read back, or its tensors are not exactly this model's (a
            missing, unexpected or other-shaped tensor).
    """
    from safetensors.torch import load_file

    path = Path(folder) / FULL_WEIGHTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {FULL_WEIGHTS_FILE} in {folder}: not a full-weight version")
    try:
        state = load_file(str(path))
    except Exception as exc:  # safetensors raises its own errors for a truncated file
        raise ValueError(f"{path} does not read back: {type(exc).__name__}: {exc}") from exc
    own = model.state_dict()
    wrong = sorted(k for k, v in state.items() if k not in own or own[k].shape != v.shape)
    missing = sorted(set(own) - set(state) - tied_names(model))
    if wrong or missing:
        raise ValueError(f"{path} does not fit this model: unexpected or other-shaped tensors {wrong[:5]}, "
                         f"missing {missing[:5]}")
    with torch.no_grad():
        model.load_state_dict(state, strict=False)


def tied_names(model: torch.nn.Module) -> set[str]:
    """State-dict names whose tensor shares storage with an earlier name (saved once, under that one)."""
    seen: set[int] = set()
    tied = set()
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:
            tied.add(name)
        seen.add(tensor.data_ptr())
    return tied

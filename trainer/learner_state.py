"""The learner's optimiser state and step, stored beside each adapter version in a format that
cannot run code when read.

``learner_state.safetensors`` holds every tensor of the optimiser's ``state_dict()`` as
``state.<param index>.<name>`` and, in the file's string metadata, the ``param_groups`` as JSON
and the step. Whoever can write the bucket can then corrupt a run but not run code in the
learner (``torch.load`` unpickles, and an unpickler runs whatever the file asks).

No other file is read: a ``learner_state.pt`` (a pickle) beside a version is ignored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from gymfleet.trainer.errors import BucketCorruptError

STATE_FILE = "learner_state.safetensors"


def save_learner_state(optimizer: torch.optim.Optimizer, step: int, folder: Path) -> Path:
    """Writes ``optimizer``'s state and ``step`` to ``folder/learner_state.safetensors``."""
    from safetensors.torch import save_file

    state = optimizer.state_dict()
    tensors = {f"state.{index}.{name}": value.detach().cpu().contiguous()
               for index, entries in state["state"].items()
               for name, value in entries.items() if isinstance(value, torch.Tensor)}
    plain = {str(index): {name: value for name, value in entries.items() if not isinstance(value, torch.Tensor)}
             for index, entries in state["state"].items()}
    metadata = {"param_groups": json.dumps(state["param_groups"]), "plain_state": json.dumps(plain),
                "step": str(int(step)), "format": "gymfleet-learner-state-1"}
    path = Path(folder) / STATE_FILE
    save_file(tensors, str(path), metadata=metadata)
    return path


def load_learner_state(folder: Path) -> tuple[dict[str, Any], int]:
    """The optimiser ``state_dict`` and the step stored in ``folder``.

    Raises:
        BucketCorruptError: no state file, or a truncated or malformed one.
    """
    folder = Path(folder)
    if (folder / STATE_FILE).exists():
        return _load_safetensors(folder / STATE_FILE)
    raise BucketCorruptError(f"no learner state ({STATE_FILE}) in {folder}")


def _load_safetensors(path: Path) -> tuple[dict[str, Any], int]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            tensors = {key: f.get_tensor(key) for key in f.keys()}
        groups = json.loads(metadata["param_groups"])
        plain = json.loads(metadata.get("plain_state", "{}"))
        step = int(metadata["step"])
    except Exception as exc:  # safetensors raises its own errors for a truncated header or body
        raise BucketCorruptError(f"{path} is not a readable learner state: {type(exc).__name__}: {exc}") from exc
    state: dict[int, dict[str, Any]] = {int(index): dict(entries) for index, entries in plain.items()}
    for key, value in tensors.items():
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = value
    return {"state": state, "param_groups": groups}, step


def check_fits(state: dict[str, Any], optimizer: torch.optim.Optimizer) -> None:
    """Checks that a loaded optimiser state matches ``optimizer``'s parameters (``load_state_dict``
    only finds out at the next step).

    Raises:
        BucketCorruptError: other param groups, parameter counts or tensor shapes.
    """
    groups = optimizer.param_groups
    saved = state.get("param_groups", [])
    if len(saved) != len(groups) or any(len(s.get("params", [])) != len(g["params"]) for s, g in zip(saved, groups)):
        raise BucketCorruptError("the learner state's param groups do not match this model's LoRA parameters")
    params = [p for g in groups for p in g["params"]]
    ids = [i for s in saved for i in s["params"]]
    for index, param in zip(ids, params, strict=True):
        for name, value in state["state"].get(index, {}).items():
            if isinstance(value, torch.Tensor) and value.dim() and value.shape != param.shape:
                raise BucketCorruptError(
                    f"the learner state's {name} of parameter {index} has shape {tuple(value.shape)}, "
                    f"the parameter {tuple(param.shape)}")

"""What the learner trains: a LoRA adapter on the frozen base, or every weight of the model.

``learner.adapter`` picks one from :data:`TRAINED_WEIGHTS`:

* ``lora`` (the default): a peft LoRA adapter (``lora_rank``, ``lora_alpha``, ``target_modules``);
  a version is a PEFT folder (``adapter_config.json``, ``adapter_model.safetensors``) and the
  reference policy of the KL penalty is the base model with the adapter disabled (no copy).
* ``none``: full fine-tuning. Every parameter of the model trains (the tied input/output
  embedding counts once); a version is a transformers folder (``config.json``,
  ``generation_config.json``, ``model.safetensors``) that an engine loads in place of its
  weights (:mod:`gymfleet.orchestrator.engines.adapters`). The KL reference is a frozen copy of
  the base made at start (one more copy of the weights, only when ``kl_coef > 0``).

Both save the optimiser state beside the weights (:mod:`gymfleet.trainer.learner_state`), so a
resume continues either; the bucket checks every file of a version by SHA-256 either way.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import torch

from gymfleet.core.full_weights import load_full_weights
from gymfleet.trainer.errors import BucketCorruptError
from gymfleet.trainer.model_card import MODEL_CARD, AdapterCard, make_shareable

ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
"""The file a LoRA version holds its adapter in (peft's name)."""


class TrainedWeights(Protocol):
    """The part of the model the learner trains, and how a version of it is saved and loaded."""

    model: Any
    """The model the learner runs forward and backward (peft-wrapped for LoRA)."""

    def trainable(self) -> list[torch.nn.Parameter]:
        """Called once when the optimiser is built, and at each gradient clip."""
        ...

    def reference(self) -> contextlib.AbstractContextManager[Any]:
        """Called for the KL reference pass: a context giving the reference (base) model."""
        ...

    def save(self, folder: Path, card: AdapterCard | None = None) -> None:
        """Called at each publish: writes the version's weight files into ``folder``, and its
        model card (``README.md``) when given."""
        ...

    def load(self, folder: Path) -> None:
        """Called on resume with a fetched (SHA-256 checked) version folder.

        Raises:
            BucketCorruptError: the folder holds no weights of this kind, or they do not fit.
        """
        ...


class LoraWeights:
    """A peft LoRA adapter on the frozen base (``learner.adapter: lora``).

    Args:
        base: the base causal LM (modified in place by peft).
        config: the learner's settings (``lora_rank``, ``lora_alpha``, ``lora_dropout``,
            ``target_modules``).
    """

    def __init__(self, base: Any, config: Any) -> None:
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                          target_modules=config.target_modules, task_type="CAUSAL_LM")
        self.model = get_peft_model(base, lora)

    def trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    @contextlib.contextmanager
    def reference(self) -> Iterator[Any]:
        with self.model.disable_adapter():  # the reference is the base model: no second copy
            yield self.model

    def save(self, folder: Path, card: AdapterCard | None = None) -> None:
        self.model.save_pretrained(folder)
        if card is not None:  # names the base by its hub id in adapter_config.json
            make_shareable(folder, card)

    def load(self, folder: Path) -> None:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        path = Path(folder) / ADAPTER_WEIGHTS_FILE
        if not path.exists():
            raise BucketCorruptError(f"no {ADAPTER_WEIGHTS_FILE} in {folder}: not a LoRA version "
                                     "(a full-weight one? its run trained with learner.adapter: none)")
        set_peft_model_state_dict(self.model, load_file(str(path)))


class FullWeights:
    """Every weight of the model trains (``learner.adapter: none``, full fine-tuning).

    Args:
        base: the base causal LM (trained in place).
        config: the learner's settings (``kl_coef`` > 0 keeps a frozen copy of the base as the
            KL reference).
    """

    def __init__(self, base: Any, config: Any) -> None:
        self.model = base
        self._reference: Any = None
        if config.kl_coef > 0:
            self._reference = copy.deepcopy(base).eval().requires_grad_(False)
        for param in self.model.parameters():
            param.requires_grad_(True)

    def trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    @contextlib.contextmanager
    def reference(self) -> Iterator[Any]:
        if self._reference is None:
            raise RuntimeError("no reference copy: it is made only when learner.kl_coef > 0")
        yield self._reference

    def save(self, folder: Path, card: AdapterCard | None = None) -> None:
        self.model.save_pretrained(folder)  # safetensors, one shard (transformers 5 default)
        if card is not None:  # the whole model: no base to name
            (Path(folder) / MODEL_CARD).write_text(card.render())

    def load(self, folder: Path) -> None:
        try:
            load_full_weights(self.model, Path(folder))
        except (OSError, ValueError) as exc:
            raise BucketCorruptError(f"{exc} (a LoRA version? its run trained with learner.adapter: lora)") from exc


TRAINED_WEIGHTS: dict[str, type[LoraWeights] | type[FullWeights]] = {"lora": LoraWeights, "none": FullWeights}
"""``learner.adapter`` -> what trains: a LoRA adapter, or every weight (full fine-tuning)."""

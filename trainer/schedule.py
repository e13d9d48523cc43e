"""The learner's learning-rate schedule: constant, linear or cosine decay after a linear warm-up.

The schedules are transformers' (``get_constant_schedule_with_warmup``,
``get_linear_schedule_with_warmup``, ``get_cosine_schedule_with_warmup``: what TRL's
``lr_scheduler_type`` and verl's ``lr_scheduler_type`` / ``lr_warmup_steps`` pick), so a TRL or
verl user gets the learning rates they know, step for step. The factor applied to
``learner.learning_rate`` for the update after ``k`` finished steps is, with ``w`` warm-up steps
and ``n`` decay steps:

* warm-up (``k < w``): ``k / w`` (the first update of a warm-up runs at learning rate 0, as in
  transformers' Trainer);
* ``constant``: 1;
* ``linear``: ``max(0, (n - k) / (n - w))``;
* ``cosine``: ``0.5 * (1 + cos(pi * (k - w) / (n - w)))`` (Loshchilov & Hutter 2017, SGDR, eq. 5
  without restarts), 0 at ``k = n``.

The schedule is a pure function of the step, and the optimiser's state (saved with every
version, :mod:`gymfleet.trainer.learner_state`) keeps each group's ``initial_lr``: a resumed
learner rebuilds it at its step and continues where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.optim.lr_scheduler import LambdaLR

Schedule = Callable[[torch.optim.Optimizer, int, int, int], LambdaLR]


def _constant(optimizer: torch.optim.Optimizer, warmup: int, total: int, last: int) -> LambdaLR:
    from transformers import get_constant_schedule_with_warmup

    return get_constant_schedule_with_warmup(optimizer, warmup, last_epoch=last)


def _linear(optimizer: torch.optim.Optimizer, warmup: int, total: int, last: int) -> LambdaLR:
    from transformers import get_linear_schedule_with_warmup

    return get_linear_schedule_with_warmup(optimizer, warmup, total, last_epoch=last)


def _cosine(optimizer: torch.optim.Optimizer, warmup: int, total: int, last: int) -> LambdaLR:
    from transformers import get_cosine_schedule_with_warmup

    return get_cosine_schedule_with_warmup(optimizer, warmup, total, last_epoch=last)


SCHEDULES: dict[str, Schedule] = {"constant": _constant, "linear": _linear, "cosine": _cosine}
"""``learner.lr_schedule`` name -> its transformers schedule."""


def make_schedule(name: str, optimizer: torch.optim.Optimizer, warmup_steps: int, decay_steps: int | None,
                  done_steps: int = 0) -> LambdaLR:
    """The schedule ``name`` over ``optimizer``, positioned after ``done_steps`` finished steps
    (its learning rate is the one of the next update).

    Args:
        name: a key of :data:`SCHEDULES`.
        optimizer: the learner's optimiser; a group without ``initial_lr`` (a fresh one, or a
            state saved before schedules) takes its current ``lr`` as the base.
        warmup_steps: steps of linear warm-up from 0.
        decay_steps: steps at which ``linear`` and ``cosine`` reach 0 (ignored by ``constant``).
        done_steps: optimiser steps already taken (a resumed learner's step).

    Raises:
        ValueError: an unknown name, or ``linear`` / ``cosine`` without ``decay_steps``.
    """
    if name not in SCHEDULES:
        raise ValueError(f"unknown learner.lr_schedule {name!r}; choose one of {', '.join(SCHEDULES)}")
    if name != "constant" and not decay_steps:
        raise ValueError(f"learner.lr_schedule {name} needs learner.lr_decay_steps (or the run's budget.max_steps)")
    for group in optimizer.param_groups:
        group.setdefault("initial_lr", group["lr"])
    return SCHEDULES[name](optimizer, warmup_steps, decay_steps or 0, done_steps - 1)

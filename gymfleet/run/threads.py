"""How a training run splits this machine's CPUs between torch in the learner process and torch in
the in-process engines (the orchestrator process).

Each process's torch starts as many intra-op threads as the machine has cores. The learner and an
in-process engine running side by side then each spin that many threads on the same cores: on a
two-core machine the embedded engine fell from about 66 to about 10 tokens/s while the learner
trained. So both are set on purpose: in ``async`` mode, where they run side by side, the learner
takes ``learner_threads`` (default half the usable CPUs), the in-process engines ``engine_threads``
(default the rest), at least one each. In ``sync`` mode they take turns (generate the step's
groups, then train on them), so each defaults to every usable CPU: a split there left half the
machine idle in each phase.

Even split, the learner's OpenMP threads shared the two cores with the engine's thread and the
orchestrator: libgomp's default lets a thread that waits at a barrier spin before it sleeps, on a
core the engine needs. So in ``async`` mode the learner process starts with
``OMP_WAIT_POLICY=PASSIVE`` (:func:`learner_environment`). Measured on ``vs_trl_terminal.py``
(seed 0, two cores): the engine's mean decode step went from 233 to 139 ms and the 9 learner
steps from 244 to 208 s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, which containers and ``taskset`` narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class ThreadPlan:
    """torch intra-op threads per process of a training run."""

    learner: int
    """The learner process's ``torch.set_num_threads``."""
    engine: int
    """The orchestrator process's, for its in-process engines (one setting per process: several
    in-process engines share it)."""


LEARNER_ASYNC_ENVIRONMENT = {"OMP_WAIT_POLICY": "PASSIVE"}
"""What the learner process's environment gets when it runs beside the engines (async mode)."""


def learner_environment(mode: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment variables the learner process starts with, beyond this process's own.

    Args:
        mode: the run's mode (``async``: the learner shares the cores with the engines).
        environ: this process's environment (default ``os.environ``); a variable it already sets wins.

    Returns:
        async: :data:`LEARNER_ASYNC_ENVIRONMENT` less what ``environ`` sets; sync: nothing.
    """
    if mode != "async":
        return {}
    environ = os.environ if environ is None else environ
    return {name: value for name, value in LEARNER_ASYNC_ENVIRONMENT.items() if name not in environ}


def split_threads(cpus: int, learner: int | None = None, engine: int | None = None,
                  mode: str = "async") -> ThreadPlan:
    """The threads of the learner and the in-process engines; unset ones share ``cpus``.

    Args:
        cpus: usable CPUs (:func:`usable_cpus`).
        learner: the learner's threads if configured.
        engine: the engines' threads if configured.
        mode: the run's mode: ``async`` (learner and engines run at once) or ``sync`` (in turns).

    Returns:
        async: ``learner`` defaults to ``cpus // 2``, ``engine`` to what the learner leaves; sync:
        each defaults to ``cpus``. Each at least 1.
    """
    if mode == "sync":
        return ThreadPlan(learner or max(1, cpus), engine or max(1, cpus))
    learner = learner or max(1, cpus // 2)
    return ThreadPlan(learner, engine or max(1, cpus - learner))

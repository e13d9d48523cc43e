"""Placement: where a training job's GRPO stage runs its roles (orchestrator, engines, learner).

The job (:mod:`gymfleet.run.job`) is a list of stages over one run (warm start, GRPO, held-out
evaluation, the report and its verdict); only the GRPO stage has roles to place, and it asks its
:class:`Placement` to run them: :class:`~gymfleet.run.local.LocalPlacement` (this process's event
loop and a learner process) or :class:`~gymfleet.run.cluster.RayPlacement` (Ray actors). The
stages never see which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from rich.console import Console

from gymfleet.core.errors import GymfleetError
from gymfleet.orchestrator import RunStatus
from gymfleet.run.config import TrainConfig
from gymfleet.run.records import GenerationTimeline


@dataclass
class GrpoOutcome:
    """How the GRPO stage ended, wherever it ran.

    Attributes:
        timeline: what the orchestrator side measured (its ``wall_s`` is the stage's).
        run_status: the run's status (the store's vocabulary: ``completed (budget)``,
            ``interrupted``, ``failed``...).
        learner_exitcode: 0 when the learner spent its budget; None when not known (Ray).
        failure: the GymfleetError the run stopped on after it started (reported, then raised
            as a TrainError); None when it did not.
        crash: any other exception it stopped on (a bug: reported, then re-raised).
        signalled: SIGINT/SIGTERM stopped it (no held-out evaluation follows).
        cluster: what each Ray role did (``train --cluster`` only).
    """

    timeline: GenerationTimeline
    run_status: RunStatus
    learner_exitcode: int | None = None
    failure: GymfleetError | None = None
    crash: BaseException | None = None
    signalled: bool = False
    cluster: dict[str, Any] | None = None

    @property
    def error(self) -> str | None:
        """The report's ``error``: why the stage stopped, when it did on an exception."""
        ended = self.failure or self.crash
        return None if ended is None else f"{type(ended).__name__}: {ended}"

    @property
    def may_evaluate(self) -> bool:
        """Whether the held-out evaluation follows (not after a failure or a signal)."""
        return self.failure is None and self.crash is None and not self.signalled


class Placement(Protocol):
    """Runs a training job's GRPO stage somewhere."""

    async def grpo(self, cfg: TrainConfig, console: Console, live: bool | None,
                   progress_every_s: float | None) -> GrpoOutcome:
        """Called once per job, after the warm start: runs rollouts and the learner until the
        budget is spent, the learner ends, or a signal stops it.

        Args:
            cfg: the training run.
            console: where messages and progress go.
            live: True: a rich live table; False: plain progress lines; None: live on a terminal.
            progress_every_s: seconds between plain progress lines (None: the default).

        Raises:
            GymfleetError: the run could not start (nothing ran: no report is written).
        """
        ...

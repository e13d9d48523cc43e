"""Placement: where a training job's stages run their roles.

The job (:mod:`gymfleet.run.job`) is a list of stages over one run (held-out base, warm start,
GRPO, held-out evaluation, the report and its verdict); every stage that does work asks its
:class:`Placement` for the role it needs: the warm start (demonstrations and SFT), the held-out
evaluation, and GRPO's orchestrator, engines and learner.
:class:`~gymfleet.run.local.LocalPlacement` runs them in this process (the learner in a process
of its own); :class:`~gymfleet.run.cluster.RayPlacement` as Ray actors. The stages never see
which, and no placement imports the job (``tests/test_layers.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from rich.console import Console

from gymfleet.core.errors import GymfleetError
from gymfleet.orchestrator import RunStatus
from gymfleet.run.config import TrainConfig
from gymfleet.run.records import ClusterSection, GenerationTimeline

if TYPE_CHECKING:
    from gymfleet.run.heldout import HeldOutEvaluation
    from gymfleet.run.warmstart import WarmStartOutcome


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
    cluster: ClusterSection | None = None

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
    """Runs a training job's roles somewhere."""

    async def warm_start(self, cfg: TrainConfig, console: Console) -> WarmStartOutcome | None:
        """Called once per job, before GRPO: the warm start when ``warmstart.enabled`` and the
        bucket is empty (:func:`gymfleet.run.warmstart.warm_start_if_new`), where this placement
        trains; None when it was skipped.

        Raises:
            GymfleetError: as :func:`gymfleet.run.warmstart.run_warm_start`.
        """
        ...

    async def heldout(self, cfg: TrainConfig, console: Console, *, base_only: bool = False,
                      known: HeldOutEvaluation | None = None) -> HeldOutEvaluation:
        """Called before GRPO with ``base_only`` (``heldout.base_first``) and after it (every
        policy the bucket has, ``known`` holding what was scored already), when
        ``heldout.enabled``: :func:`gymfleet.run.heldout.heldout_stage`, where this placement
        plays the tasks' envs.

        Raises:
            ConfigError: a held-out family cannot run (as :func:`gymfleet.run.heldout.evaluate_heldout`).
        """
        ...

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

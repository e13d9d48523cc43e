"""Held-out evaluation of a policy (base model or a published adapter) on a task's instances.

Runs a collection (:func:`gymfleet.run.collection.collect`) of one task over fixed
instances with the given adapter and returns the mean reward, so that a trained adapter and the
untrained one are compared on the same instances with the same sampling seeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from gymfleet.core.records import RolloutStatus
from gymfleet.orchestrator import PolicyConfig, RunConfig, TaskConfig, TrajectoryStore
from gymfleet.run.collection import collect


@dataclass(frozen=True)
class EvalResult:
    """The rewards of the rollouts that finished (infrastructure failures excluded).

    ``by_rollout`` maps each of those rollouts' ids to its reward: the ids are the same for every
    policy evaluated on the same instances, samples and seed, so two results can be paired.
    """

    by_rollout: dict[str, float]

    @property
    def rewards(self) -> list[float]:
        """The rewards, in the store's order."""
        return list(self.by_rollout.values())

    @property
    def n_rollouts(self) -> int:
        """Rollouts scored."""
        return len(self.by_rollout)

    @property
    def mean_reward(self) -> float:
        """Their mean reward (0 when none finished)."""
        return sum(self.by_rollout.values()) / max(self.n_rollouts, 1)


async def evaluate(
    task: TaskConfig, instances: list[str], workdir: Path, *, adapter: str | None = None, name: str = "eval",
    samples_per_instance: int = 1, max_in_flight: int = 8, seed: int = 0, policy: PolicyConfig | None = None,
) -> EvalResult:
    """Mean reward of the base model (``adapter=None``) or of a PEFT adapter folder on ``instances``.

    Args:
        task: the task (its env, turn limit and sampling are used; instances are replaced).
        instances: held-out instance ids.
        workdir: where this evaluation's store goes (``workdir/<name>.db``).
        adapter: a PEFT adapter folder (a bucket version's path), or None for the base model.
        samples_per_instance: rollouts per instance.
        seed: the sampling seed base (keep it equal across the runs being compared).
        policy: the model and engines to sample with (a training run's ``policy``; its own
            ``adapter`` is replaced by ``adapter``); None: the default embedded model.
    """
    run_id = "heldout"  # the same run id (hence the same rollout ids and seeds) for every policy compared
    task = task.model_copy(update={"instances": list(instances), "max_instances": None, "passes": 1,
                                   "exclude_instances": [],
                                   "group_size": samples_per_instance, "name": task.name})
    config = RunConfig.model_validate({
        "run_id": run_id, "store": str(Path(workdir) / f"{name}.db"),
        "metrics_path": str(Path(workdir) / f"{name}.metrics.jsonl"), "max_in_flight": max_in_flight,
        "seed": seed, "policy": _policy(policy, adapter), "tasks": [task.model_dump()],
        "sampling": task.sampling.model_dump(include={"temperature", "top_p"}),  # the run's, carried by its task
    })
    await collect(config, console=Console(stderr=True, quiet=True), live=False)
    async with await TrajectoryStore.open(config.store) as store:
        rows = await store.trajectories(run_id, limit=None)
    return EvalResult({r.trajectory.rollout_id: r.trajectory.reward for r in rows if r.trajectory.status.trains
                       and r.trajectory.status is not RolloutStatus.aborted
                       and "branch_of" not in r.trajectory.metrics})  # a harness's other leaves: one rollout


def _policy(policy: PolicyConfig | None, adapter: str | None) -> PolicyConfig | dict[str, object]:
    if policy is None:
        return {"adapter": adapter} if adapter else {}
    return policy.model_copy(update={"adapter": adapter})

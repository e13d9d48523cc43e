"""Held-out evaluation of a training run's policies: pass@1 per task family with its standard error.

The policies are the base model, the warm-start version (the bucket's version whose
``meta.json`` carries ``warm_start``) and the final version (the bucket's newest), each that
exists. Every one runs :func:`gymfleet.run.evaluate.evaluate` on the ``heldout:`` instances
(:class:`~gymfleet.run.config.HeldOutConfig`) with the same rollout ids and seeds, so the
comparison is paired. A rollout passes when its reward is >= ``pass_threshold`` (default 1.0).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from gymfleet.core.errors import GymfleetError
from gymfleet.run.config import TrainConfig
from gymfleet.run.evaluate import evaluate
from gymfleet.run.records import Gain, HeldOutSection, PassRate, PolicySource, gains_text
from gymfleet.trainer import AdapterBucket

POLICIES = ("base", "warm_start", "final")
"""The policies compared, in the report's order."""


BASE = PolicySource("base")

COMPARISONS = (("warm_start", "base"), ("final", "warm_start"), ("final", "base"))
"""The gains reported per family: (policy, the policy it is compared with)."""


@dataclass
class HeldOutEvaluation:
    """The held-out scores of a run: ``scores[family][policy]``.

    Attributes:
        threshold: the reward a rollout needs to pass.
        samples_per_instance: rollouts per instance and policy.
        seed: the sampling seed base shared by every policy.
        instances: held-out instance ids per family.
        policies: what was evaluated (name, adapter folder, bucket version).
        scores: pass rate per family, per policy name.
        errors: families that could not be evaluated (their service is missing here...), with why.
        passed: ``passed[family][policy][rollout_id]``: each rollout's pass/fail, for the paired
            gains (not in the report: the stores in the evaluation's workdir hold the rollouts).
    """

    threshold: float
    samples_per_instance: int
    seed: int
    instances: dict[str, list[str]]
    policies: list[PolicySource] = field(default_factory=list)
    scores: dict[str, dict[str, PassRate]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    passed: dict[str, dict[str, dict[str, bool]]] = field(default_factory=dict)

    def gains(self) -> dict[str, dict[str, Gain]]:
        """``gains[family]["final_vs_warm_start"]``: each of :data:`COMPARISONS` both scores exist for."""
        def paired(family: str, after: str, before: str) -> tuple[dict[str, bool], dict[str, bool]] | None:
            outcomes = self.passed.get(family, {})
            return (outcomes[after], outcomes[before]) if after in outcomes and before in outcomes else None

        return {family: {f"{after}_vs_{before}": Gain.between(by_policy[after], by_policy[before],
                                                              paired(family, after, before))
                         for after, before in COMPARISONS if after in by_policy and before in by_policy}
                for family, by_policy in self.scores.items()}

    def section(self) -> HeldOutSection:
        """The report's ``evaluation`` section (``gains``: :meth:`gains`, delta ± its SE and z)."""
        return HeldOutSection(
            metric=f"pass@1: fraction of rollouts with reward >= {self.threshold}; "
                   "se = sqrt(p(1-p)/n), the binomial standard error",
            threshold=self.threshold, samples_per_instance=self.samples_per_instance, seed=self.seed,
            instances=dict(self.instances), policies=list(self.policies),
            by_family={family: dict(by_policy) for family, by_policy in self.scores.items()},
            gains=self.gains(), errors=dict(self.errors))

    def lines(self) -> list[str]:
        """One line per family: ``echo: base 0.250 ± 0.153 (n=8), warm_start ..., final 0.500 ± 0.177 (n=8);
        warm start vs base ...; final vs warm start +0.250 ± 0.234 (1.1 SE; paired 1.4 SE)``."""
        gains = self.gains()
        return [f"{family}: " + ", ".join(f"{name} {by_policy[name].describe()}"
                                          for name in POLICIES if name in by_policy)
                + gains_text(gains.get(family, {}))
                for family, by_policy in self.scores.items()] + [
            f"{family}: not evaluated: {error}" for family, error in self.errors.items()]


def run_policies(bucket: AdapterBucket, fetch_dir: Path) -> list[PolicySource]:
    """The base model, the warm-start version and the newest version of ``bucket`` (those that
    exist), the versions fetched into ``fetch_dir``.

    Raises:
        BucketError: a committed version cannot be read or fetched.
    """
    policies = [BASE]
    versions = bucket.versions()
    warm = next((v for v in versions if "warm_start" in bucket.get(v).meta), None)
    if warm is not None:
        policies.append(PolicySource("warm_start", str(bucket.fetch(warm, fetch_dir)), warm))
    if versions:
        newest = max(versions)
        policies.append(PolicySource("final", str(bucket.fetch(newest, fetch_dir)), newest))
    return policies


async def evaluate_heldout(cfg: TrainConfig, policies: list[PolicySource], workdir: Path,
                           console: Console | None = None,
                           known: HeldOutEvaluation | None = None) -> HeldOutEvaluation:
    """Scores ``policies`` on every family of ``cfg.heldout.instances``.

    Args:
        cfg: the training run (its tasks, policy model and ``heldout`` section).
        policies: from :func:`run_policies` (or one adapter folder, for ``gymfleet eval heldout``).
        workdir: where each evaluation's store goes (``workdir/<policy>-<family>.db``, replaced).
        console: where one line per evaluation goes (None: quiet).
        known: scores measured earlier in this run (the base, with ``base_first``): kept, not rerun.

    A family whose evaluation fails on a GymfleetError (its service is missing on this machine, its
    instances are wrong) is recorded in ``errors`` and skipped; the others go on.
    """
    held = cfg.heldout
    out = known or HeldOutEvaluation(held.pass_threshold, held.samples_per_instance, held.seed,
                                     {k: list(v) for k, v in held.instances.items()})
    tasks = {t.name: t for t in cfg.run.tasks}
    by_adapter: dict[str | None, str] = {}
    Path(workdir).mkdir(parents=True, exist_ok=True)
    for policy in policies:
        if policy.name not in {p.name for p in out.policies}:
            out.policies.append(policy)
        for family, ids in held.instances.items():
            if family in out.errors:
                continue
            scores = out.scores.setdefault(family, {})
            if policy.name in scores:
                continue
            same = by_adapter.get(policy.adapter)  # the final version is the warm start: one run
            if same is not None and same in scores:
                scores[policy.name] = scores[same]
                if same in out.passed.get(family, {}):
                    out.passed[family][policy.name] = out.passed[family][same]
                continue
            name = f"{policy.name}-{family}"
            for suffix in (".db", ".metrics.jsonl"):
                Path(workdir, name + suffix).unlink(missing_ok=True)
            try:
                result = await evaluate(tasks[family], ids, Path(workdir), adapter=policy.adapter, name=name,
                                        samples_per_instance=held.samples_per_instance,
                                        max_in_flight=held.max_in_flight, seed=held.seed, policy=cfg.run.policy)
            except GymfleetError as exc:
                out.errors[family] = f"{type(exc).__name__}: {exc}"
                out.scores.pop(family, None)
                if console is not None:
                    console.print(f"held-out {family}: not evaluated: {exc}", markup=False, highlight=False)
                continue
            scores[policy.name] = PassRate.from_rewards(result.rewards, held.pass_threshold)
            out.passed.setdefault(family, {})[policy.name] = {
                rollout_id: reward >= held.pass_threshold for rollout_id, reward in result.by_rollout.items()}
            if console is not None:
                console.print(f"held-out {family} {policy.name}: pass@1 {scores[policy.name].describe()}",
                              markup=False, highlight=False)
        by_adapter.setdefault(policy.adapter, policy.name)
    return out


async def heldout_stage(cfg: TrainConfig, console: Console, *, base_only: bool = False,
                        known: HeldOutEvaluation | None = None) -> HeldOutEvaluation:
    """The training job's held-out stage, wherever its placement runs it: the base model alone
    (``base_only``: ``heldout.base_first``, before anything trains), or every policy the run's
    bucket has (the base, unless ``known`` holds it already): the report's ``evaluation``.
    Adapters are fetched into ``<report_dir>/heldout/adapters`` by whoever runs it."""
    workdir = Path(cfg.report_dir) / "heldout"
    if base_only:
        return await evaluate_heldout(cfg, [BASE], workdir, console)
    bucket = AdapterBucket(cfg.bucket, cfg.run.run_id)
    policies = await asyncio.to_thread(run_policies, bucket, workdir / "adapters")
    console.print(f"held-out evaluation of {', '.join(p.name for p in policies)} on "
                  f"{sum(map(len, cfg.heldout.instances.values()))} instances", markup=False, highlight=False)
    return await evaluate_heldout(cfg, policies, workdir, console, known)

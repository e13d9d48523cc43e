"""`gymfleet runs list|show|export`: look at stored runs and their trajectories."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Column, Table
from rich.text import Text
from sqlalchemy.engine import make_url

from gymfleet.core.errors import StoreError
from gymfleet.core.records import RolloutStatus, Trajectory
from gymfleet.orchestrator import TrajectoryStore, normalise_url, RunSummary, StoredTrajectory

runs_app = typer.Typer(no_args_is_help=True, help="Stored runs: list, show, export.")


PIPED_WIDTH = 100_000
"""The width of piped output (no terminal, no ``COLUMNS``): wide enough that nothing wraps."""


def console() -> Console:
    """A console sized for the terminal at the time of the call (a module-level one would keep the
    width of whatever first imported this lazily loaded module). Piped output (no terminal and no
    ``COLUMNS``) is never wrapped: code and numbers stay on their lines for the tools reading it."""
    if piped():
        return Console(width=PIPED_WIDTH)
    return Console()


def piped() -> bool:
    """True when stdout is not a terminal and ``COLUMNS`` does not ask for a width."""
    return not sys.stdout.isatty() and not os.environ.get("COLUMNS")
T = TypeVar("T")

StoreOpt = Annotated[
    str | None, typer.Option("--store", help="Store URL; default: every runs/*/store.db (or runs/RUN_ID/store.db).")
]
RunsDirOpt = Annotated[Path, typer.Option(
    envvar="GYMFLEET_RUNS_DIR",
    help="The folder holding the runs (RUN_ID/store.db): ./runs by default; from elsewhere pass the "
         "project's runs/ folder here or set GYMFLEET_RUNS_DIR.")]
ROLE_STYLE = {"system": "magenta", "user": "green", "assistant": "cyan"}


def _stores(store: str | None, runs_dir: Path, run_id: str | None = None) -> list[str]:
    if store:
        try:
            url = make_url(normalise_url(store))
        except StoreError as exc:
            _fail(str(exc))
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            if not Path(url.database).expanduser().is_file():  # reading must not create an empty store
                _fail(f"no store at {url.database}; pass the `store:` of the run config")
        return [store]
    if run_id is not None:
        path = runs_dir / run_id / "store.db"
        if not path.exists():
            _fail(f"no store at {path}; pass --runs-dir DIR (the folder holding RUN_ID/store.db, "
                  "or set GYMFLEET_RUNS_DIR) or --store URL (the `store:` of the run config)")
        return [str(path)]
    return sorted(str(p) for p in runs_dir.glob("*/store.db"))


def _fail(message: str) -> None:
    Console(stderr=True).print(Text("error: ", style="red") + Text(message))
    raise typer.Exit(2)


def _with_store(url: str, fn: Callable[[TrajectoryStore], Awaitable[T]]) -> T:
    async def go() -> T:
        async with await TrajectoryStore.open(url) as s:
            return await fn(s)

    try:
        return asyncio.run(go())
    except StoreError as exc:
        _fail(str(exc))
        raise  # unreachable: _fail exits


@runs_app.command("list")
def list_runs(store: StoreOpt = None, runs_dir: RunsDirOpt = Path("runs")) -> None:
    """Lists runs: status, start time (xN: started N times), complete groups, rollouts by status, mean reward."""
    # Ids are never cut: they fold onto more lines when the terminal is narrow; short values stay whole.
    table = Table(_fold("run"), _whole("status"), _whole("started"), _whole("groups"), _fold("rollouts"),
                  _whole("reward"), box=box.SIMPLE_HEAD, pad_edge=False)
    urls = _stores(store, runs_dir)
    for url in urls:
        for run in _with_store(url, lambda s: s.list_runs()):
            rewards = [t.mean_reward_ok for t in run.tasks if t.mean_reward_ok is not None]
            started = run.created_at.strftime("%m-%d %H:%M") + (f" x{run.n_starts}" if run.n_starts > 1 else "")
            by_status = " ".join(f"{k}={v}" for k, v in sorted(run.by_status.items()))
            table.add_row(
                run.run_id, run.status, started, f"{run.n_groups_complete}/{run.n_groups}",
                f"{run.n_trajectories}: {by_status}" if by_status else "0",
                f"{sum(rewards) / len(rewards):.3f}" if rewards else "-",
            )
    if not table.rows:
        console().print(f"no runs in {', '.join(urls)} (a run refused at start records nothing)", markup=False,
                        highlight=False, soft_wrap=True)
        return
    console().print(table)


class Verdict(str, Enum):
    passed = "pass"
    failed = "fail"


@runs_app.command("show")
def show(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    store: StoreOpt = None,
    runs_dir: RunsDirOpt = Path("runs"),
    n: Annotated[int, typer.Option("--n", min=0, help="Trajectories to print.")] = 3,
    status: Annotated[RolloutStatus | None, typer.Option(help="Only trajectories with this status.")] = None,
    task: Annotated[str | None, typer.Option(help="Only this task.")] = None,
    rollout: Annotated[str | None, typer.Option(help="Only this rollout id.")] = None,
    verdict: Annotated[Verdict | None, typer.Option(
        help="Only rollouts the grader passed (reward >= --pass-threshold) or failed (below it), whatever their status.")] = None,
    pass_threshold: Annotated[float, typer.Option(help="The reward at which a rollout passes.")] = 1.0,
    min_reward: Annotated[float | None, typer.Option(help="Only rollouts with at least this reward.")] = None,
    max_reward: Annotated[float | None, typer.Option(help="Only rollouts with at most this reward.")] = None,
    version: Annotated[int | None, typer.Option(
        help="Only rollouts the policy version N sampled (the newest version among their generated tokens; 0: the base).")] = None,
    max_chars: Annotated[int, typer.Option(help="Cut each message to this many characters (0: never).")] = 2000,
) -> None:
    """Shows a run's per-task tallies, then its trajectories as readable conversations, each with the
    grader's verdict and reason (the tests that failed and why, or the grading error)."""
    (url,) = _stores(store, runs_dir, run_id)
    picked = RolloutFilter(verdict, pass_threshold, min_reward, max_reward, version)

    async def fetch(s: TrajectoryStore) -> tuple[RunSummary, list[StoredTrajectory]]:
        filters = dict(limit=None if picked.active else n, task=task, rollout_id=rollout, status=status)
        return await s.run_summary(run_id), await s.trajectories(run_id, **filters)

    summary, trajs = _with_store(url, fetch)
    names = [t.task for t in summary.tasks]
    if task is not None and task not in names:
        _fail(f"run {run_id} has no task {task!r} (its tasks: {', '.join(names) or 'none'})")
    console().print(_summary_table(summary))
    if not trajs and (status or rollout):
        console().print("no rollout matches --status/--rollout", highlight=False)
    chosen = [t for t in trajs if picked.keeps(t.trajectory)][:n]
    if picked.active:
        console().print(f"{len(chosen)} of {sum(picked.keeps(t.trajectory) for t in trajs)} matching rollouts "
                        f"(of {len(trajs)})", highlight=False)
    for stored in chosen:
        _print_trajectory(stored, max_chars, pass_threshold)


@dataclass(frozen=True)
class RolloutFilter:
    """What ``runs show`` keeps beyond the store's own filters (status, task, rollout id)."""

    verdict: Verdict | None = None
    pass_threshold: float = 1.0
    min_reward: float | None = None
    max_reward: float | None = None
    version: int | None = None

    @property
    def active(self) -> bool:
        return any(v is not None for v in (self.verdict, self.min_reward, self.max_reward, self.version))

    def keeps(self, traj: Trajectory) -> bool:
        passed = traj.reward >= self.pass_threshold
        return ((self.verdict is None or passed == (self.verdict is Verdict.passed))
                and (self.min_reward is None or traj.reward >= self.min_reward)
                and (self.max_reward is None or traj.reward <= self.max_reward)
                and (self.version is None or behaviour_version(traj) == self.version))


def behaviour_version(traj: Trajectory) -> int:
    """The newest policy version among a trajectory's generated tokens (0: the base model)."""
    generated = traj.versions[traj.loss_mask == 1] if len(traj.loss_mask) else traj.versions
    return max(int(generated.max()), 0) if len(generated) else 0


def grader_reason(metrics: dict[str, Any]) -> str:
    """One line on why the grader gave what it gave, from a trajectory's ``metrics`` (the env's
    last ``info``): the tests that failed and their messages, or the grading error; "" when the
    env recorded no grading."""
    grading = metrics.get("grading")
    if not isinstance(grading, dict):
        return ""
    tests: dict[str, Any] = grading["tests"] if isinstance(grading.get("tests"), dict) else {}
    n_passed = sum(v == "passed" for v in tests.values())
    parts = [f"{n_passed}/{len(tests)} tests passed"] if tests else []
    failures: dict[str, Any] = grading["failures"] if isinstance(grading.get("failures"), dict) else {}
    parts += [f"{name}: {' '.join(str(msg).split())[:300] or tests.get(name, 'failed')}" for name, msg in failures.items()]
    if grading.get("error"):
        parts.append(f"grading error: {grading['error']}")
    return "; ".join(parts)


def _fold(header: str) -> Column:
    """A column of long values (ids): narrowed first when the terminal is narrow, folding onto more
    lines, never cut with an ellipsis."""
    return Column(header, overflow="fold")


def _whole(header: str) -> Column:
    """A column of short values (counts, statuses): kept whole while long ones fold."""
    return Column(header, no_wrap=True)


def _summary_table(run: RunSummary) -> Table:
    table = Table(_fold("task"), _fold("env"), _whole("rollouts"), _fold("by status"),
                  _whole("mean reward"), box=box.SIMPLE_HEAD, pad_edge=False, caption="mean reward over ok and truncated rollouts",
                  title=f"run {run.run_id}: {run.status}, groups {run.n_groups_complete}/{run.n_groups} "
                        f"complete, started {run.n_starts}x", title_justify="left")
    for t in run.tasks:
        table.add_row(t.task, t.env_id, str(t.n_trajectories),
                      " ".join(f"{k}={v}" for k, v in sorted(t.by_status.items())),
                      f"{t.mean_reward_ok:.3f}" if t.mean_reward_ok is not None else "-")
    return table


def _print_trajectory(stored: StoredTrajectory, max_chars: int, pass_threshold: float = 1.0) -> None:
    traj = stored.trajectory
    style = "green" if traj.status is RolloutStatus.ok else "yellow" if traj.status is RolloutStatus.truncated else "red"
    console().print("-" * 40) if piped() else console().rule()
    console().print(Text(f"{traj.rollout_id}  ·  {traj.instance_id}", style="bold"), overflow="fold")
    passed = traj.reward >= pass_threshold
    head = Text.assemble(("status ", "bold"), (traj.status.value, style), ("  reward ", "bold"), f"{traj.reward:g}",
                         ("  verdict ", "bold"), ("pass" if passed else "fail", "green" if passed else "red"),
                         ("  policy ", "bold"), f"v{behaviour_version(traj)}",
                         ("  tokens ", "bold"), f"{traj.n_tokens} ({traj.n_generated_tokens} generated)")
    if traj.reason:
        head.append(f"\nreason: {traj.reason}", style=style)
    why = grader_reason(traj.metrics)
    if why:
        head.append(f"\ngrader: {why}")
    console().print(head)
    for message in traj.messages:
        content = message.content
        if max_chars and len(content) > max_chars:
            content = content[:max_chars] + f"\n… ({len(message.content) - max_chars} more characters)"
        if piped():  # as it is: no border, no wrapping
            console().print(Text(f"[{message.role}]", style="bold"))
            console().print(Text(content), soft_wrap=True)
            continue
        console().print(Panel(Text(content), title=message.role, title_align="left",
                              border_style=ROLE_STYLE.get(message.role, "white")))
    timings = " ".join(f"{k}={v:.2f}" for k, v in sorted(traj.timings.items()) if isinstance(v, int | float))
    console().print(Text(f"timings (s): {timings}", style="dim"))


class Format(str, Enum):
    jsonl = "jsonl"
    parquet = "parquet"
    swebench = "swebench"


@runs_app.command("export")
def export(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    out: Annotated[Path, typer.Argument(help="Output file.")],
    fmt: Annotated[Format, typer.Option("--format", help="jsonl or parquet (both load with `datasets`), or swebench (a predictions file of the run's gymfleet/SWE-v0 patches).")] = Format.jsonl,
    status: Annotated[list[RolloutStatus] | None, typer.Option(help="Only these statuses (repeatable).")] = None,
    every: Annotated[bool, typer.Option("--all", help="swebench: every patch, with distinct model names (default: the best-rewarded per instance).")] = False,
    store: StoreOpt = None,
    runs_dir: RunsDirOpt = Path("runs"),
) -> None:
    """Exports a run's trajectories, token-exact, to JSONL or parquet; or its SWE patches as
    SWE-bench predictions (``gymfleet eval swebench --predictions out.jsonl`` grades them)."""
    (url,) = _stores(store, runs_dir, run_id)
    statuses = list(status) if status else None
    try:
        if fmt is Format.swebench:
            n = _with_store(url, lambda s: _export_predictions(s, run_id, out, statuses, every))
            what = "predictions"
        else:
            n = _with_store(url, lambda s: s.export(run_id, out, fmt.value, statuses))
            what = "trajectories"
    except OSError as exc:  # the output folder cannot be created or written
        _fail(f"cannot write {out}: {exc}; pass a writable output path")
    console().print(f"wrote {n} {what} to {out}", highlight=False)


async def _export_predictions(store: TrajectoryStore, run_id: str, out: Path,
                              statuses: list[RolloutStatus] | None, every: bool) -> int:
    from gymfleet.envs.swe.predictions import predictions_from_trajectories, write_predictions

    await store.run_summary(run_id)  # RunNotFoundError names the known runs
    stored = await store.trajectories(run_id, limit=None)
    trajs = [s.trajectory for s in stored if statuses is None or s.trajectory.status in statuses]
    return write_predictions(predictions_from_trajectories(trajs, run_id, every), out)

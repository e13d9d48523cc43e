"""`gymfleet envs list|check` and `gymfleet rollout`: look at envs, check their contract, play scripted policies."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from gymfleet.core.errors import EnvError
from gymfleet.envs.base import ConstantPolicy, Policy
from gymfleet.envs.check import check_env
from gymfleet.envs.episode import Episode, run_episode
from gymfleet.envs.errors import EnvCheckError
from gymfleet.envs.registry import env_class, list_envs, make_agent_env

envs_app = typer.Typer(no_args_is_help=True, help="Registered environments.")


def console() -> Console:
    """A console sized for the terminal at the time of the call (a module-level one would keep the
    width of whatever first imported this lazily loaded module). Piped, lines stay whole: code
    and numbers are never cut at 80 columns."""
    out = Console()
    out.soft_wrap = not out.is_terminal
    return out
err_console = Console(stderr=True)


@envs_app.command("list")
def list_command(
    namespace: Annotated[str | None, typer.Option(help="Only ids in this namespace.")] = None,
) -> None:
    """Lists every registered gymfleet env id."""
    for env_id in list_envs(namespace):
        typer.echo(env_id)


@envs_app.command("check")
def check_command(
    env_id: Annotated[str, typer.Argument(help="Env id, e.g. gymfleet/Terminal-v0 or mypkg/Thing-v0.")],
    n_instances: Annotated[int, typer.Option("--instances", min=1, help="Instances to play.")] = 2,
    instance: Annotated[list[str] | None, typer.Option(help="Play this instance (repeatable).")] = None,
    env_arg: Annotated[
        list[str] | None, typer.Option("--env-arg", help="KEY=VALUE passed to the env (repeatable).")
    ] = None,
) -> None:
    """Checks the env contract: types, gold earns 1, no-op earns 0, close releases everything."""
    kwargs = _env_kwargs(env_arg)
    try:
        with Heartbeat(err_console, f"envs check {env_id}"):  # image builds can take minutes: say it still runs
            report = check_env(env_id, env_kwargs=kwargs, n_instances=n_instances, instance_ids=instance)
    except EnvCheckError as exc:
        console().print(f"[red]contract broken:[/] {exc}", markup=True, highlight=False)
        raise typer.Exit(1) from None
    except (EnvError, ValidationError, KeyError) as exc:  # bad env id or env argument
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        console().print(f"[red]error:[/] {message}", markup=True, highlight=False)
        raise typer.Exit(2) from None
    console().print(f"[green]ok[/] {env_id}: {report.n_instances} instance(s), gold earned 1 and no-op 0 "
                  f"on each ({', '.join(report.gold_rewards)}), close left nothing ({report.duration_s:.1f} s)",
                  highlight=False)


HEARTBEAT_S = 15.0
"""Seconds between two "still running" lines of a long ``envs check``."""


class Heartbeat:
    """While its ``with`` lasts, prints ``<what>: still running after N s ...`` every ``every_s``
    seconds (from a thread: the check it watches blocks this one), so that a check that builds
    images for minutes is never silent.

    Args:
        out: where the lines go (stderr).
        what: names the work.
        every_s: seconds between two lines.
    """

    def __init__(self, out: Console, what: str, every_s: float = HEARTBEAT_S) -> None:
        self.out, self.what, self.every_s = out, what, every_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._done.wait(self.every_s):
            self.out.print(f"{self.what}: still running after {time.monotonic() - self._t0:.0f} s (a first check "
                           "builds the env's images and starts its services: minutes)", markup=False, highlight=False)


def _env_kwargs(env_arg: list[str] | None) -> dict[str, str]:
    bad = [item for item in (env_arg or []) if "=" not in item]
    if bad:
        raise typer.BadParameter(f"{bad[0]!r} is not KEY=VALUE, e.g. --env-arg sandbox=local", param_hint="--env-arg")
    return dict(item.split("=", 1) for item in (env_arg or []))


class PolicyName(str, Enum):
    gold = "gold"
    noop = "noop"


def rollout(
    env: Annotated[str, typer.Option("--env", help="Env id, e.g. gymfleet/Terminal-v0.")],
    policy: Annotated[PolicyName, typer.Option(help="Scripted policy to play.")] = PolicyName.gold,
    n: Annotated[int, typer.Option("--n", min=1, help="Episodes (instances in order).")] = 1,
    instance: Annotated[str | None, typer.Option(help="Play this instance only.")] = None,
    max_turns: Annotated[int, typer.Option(min=1)] = 50,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
    env_arg: Annotated[
        list[str] | None, typer.Option("--env-arg", help="KEY=VALUE passed to the env (repeatable).")
    ] = None,
    artifacts_dir: Annotated[
        str, typer.Option(help="Folder for the PNGs of envs that make pictures (screenshots, renders), "
                               "under a subfolder per policy (gold/, noop/).")
    ] = "runs/rollouts",
) -> None:
    """Plays a scripted policy (gold or noop) and prints each trajectory and its reward."""
    kwargs: dict[str, str] = _env_kwargs(env_arg)
    started = time.time()
    try:
        kwarg = env_class(env).artifacts_kwarg
        if kwarg:  # one folder per policy: a no-op rollout keeps the gold one's pictures
            kwargs.setdefault(kwarg, str(Path(artifacts_dir) / policy.value))
        episodes = asyncio.run(_rollouts(env, policy, n, instance, max_turns, kwargs))
    except (EnvError, ValidationError, KeyError) as exc:  # bad env id, env argument or instance id
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        err_console.print(f"[red]error:[/] {message}", markup=True, highlight=False)
        raise typer.Exit(2) from None
    for ep in episodes:
        if json_out:
            typer.echo(json.dumps(_episode_json(ep), default=str))
        else:
            _print_episode(ep)
    _print_summary(episodes, err_console if json_out else console())  # --json: stdout holds JSON lines only
    if kwarg:
        _print_pictures(Path(kwargs[kwarg]), started, err_console if json_out else console())


def _print_pictures(folder: Path, since: float, out: Console) -> None:
    """Says where this rollout's PNGs went (on stderr with --json, so that stdout stays JSON)."""
    pngs = sorted(p for p in folder.rglob("*.png") if p.stat().st_mtime >= since - 1) if folder.is_dir() else []
    where = folder.resolve()
    if not pngs:
        out.print(f"no PNGs written (folder {where})", markup=False, highlight=False)
        return
    dirs = sorted({p.parent.resolve() for p in pngs})
    out.print(f"wrote {len(pngs)} PNG{'s' if len(pngs) > 1 else ''} under {where}: "
                      + ", ".join(str(d) for d in dirs), markup=False, highlight=False, soft_wrap=True)


async def _rollouts(
    env_id: str, policy_name: PolicyName, n: int, instance: str | None, max_turns: int, kwargs: dict
) -> list[Episode]:
    env = make_agent_env(env_id, **kwargs)
    try:
        ids = [instance] if instance else env.instance_ids()
        episodes = []
        for i in range(n):
            instance_id = ids[i % len(ids)]
            policy: Policy = env.gold_policy(instance_id) if policy_name is PolicyName.gold else ConstantPolicy(
                env.noop_action
            )
            episodes.append(
                await run_episode(env, policy, env_id=env_id, instance_id=instance_id, max_turns=max_turns)
            )
        return episodes
    finally:
        await env.close_async()


def _episode_json(ep: Episode) -> dict:
    return {
        "env_id": ep.env_id,
        "instance_id": ep.instance_id,
        "reward": ep.reward,
        "terminated": ep.terminated,
        "truncated": ep.truncated,
        "turns": [{"action": t.action, "observation": t.observation} for t in ep.turns],
        "info": ep.info,
        "duration_s": round(ep.duration_s, 3),
    }


def _print_episode(ep: Episode) -> None:
    console().rule(f"{ep.env_id} · {ep.instance_id}")
    console().print(ep.first_observation, markup=False, highlight=False)
    for i, turn in enumerate(ep.turns):
        console().print(f"[bold cyan]action {i}[/]")
        console().print(turn.action, markup=False, highlight=False)
        console().print(f"[bold green]observation {i}[/]")
        console().print(turn.observation, markup=False, highlight=False)
    end = "terminated" if ep.terminated else "truncated" if ep.truncated else "running"
    console().print(f"[bold]reward {ep.reward:g}[/] ({end}, {len(ep.turns)} turns, {ep.duration_s:.1f} s)")


def _print_summary(episodes: list[Episode], out: Console) -> None:
    table = Table("env", "instance", "reward", "turns", "seconds")
    for ep in episodes:
        table.add_row(ep.env_id, ep.instance_id, f"{ep.reward:g}", str(len(ep.turns)), f"{ep.duration_s:.1f}")
    out.print(table)

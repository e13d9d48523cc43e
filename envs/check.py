"""``check_env``: the env contract as a function a plugin author runs (``gymfleet envs check ID``).

In the spirit of Gymnasium's ``utils/env_checker.check_env``, for gymfleet's text envs:

1. types: ``system_prompt`` is non-empty text, ``noop_action`` text, ``requires`` known needs,
   ``instance_ids()`` a non-empty list of distinct strings;
2. ``gold_policy(instance_id)`` is stateless (works before any reset) and its episode earns
   exactly 1; the no-op agent (``noop_action`` every turn) earns exactly 0; every reset and step
   returns the documented types and ``info["instance_id"]``;
3. ``close_async`` is idempotent and releases everything: no sandbox still leased, no browser
   context open, and (for an env made here, on private resources) no child process and no Docker
   container of this process left;
4. (for an id, in :func:`check_env`) Gymnasium's own ``gymnasium.utils.env_checker.check_env``
   passes on a fresh ``gymnasium.make(id)``, without a warning (:func:`check_gymnasium_api`):
   spaces, seeding, the same info for the same seed and action (values that differ between runs
   go under ``info["volatile"]``, :mod:`gymfleet.envs.info`), no object shared between calls.

A failure raises :class:`~gymfleet.envs.errors.EnvCheckError` naming the env, the instance,
the check and what to fix.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gymfleet.envs.base import AgentEnv, ConstantPolicy, Policy
from gymfleet.envs.errors import EnvCheckError
from gymfleet.envs.info import VOLATILE_KEY, Volatile
from gymfleet.envs.needs import NEEDS
from gymfleet.envs.registry import make_agent_env
from gymfleet.envs.resources import EnvResources


@dataclass
class CheckReport:
    """What :func:`check_env` checked.

    Attributes:
        gold_rewards: per checked instance, the gold episode's total reward (1.0 each).
        noop_rewards: per checked instance, the no-op episode's total reward (0.0 each).
        duration_s: wall time of the whole check.
        gymnasium_checked: whether Gymnasium's own checker ran (and passed).
    """

    env_id: str
    n_instances: int
    gold_rewards: dict[str, float] = field(default_factory=dict)
    noop_rewards: dict[str, float] = field(default_factory=dict)
    duration_s: float = 0.0
    gymnasium_checked: bool = False


def check_env(env_id_or_env: str | AgentEnv, *, env_kwargs: dict[str, Any] | None = None,
              n_instances: int = 2, instance_ids: Sequence[str] | None = None,
              max_steps: int = 100, gymnasium_checker: bool = True) -> CheckReport:
    """Checks the env contract (module docstring) in a fresh event loop (see
    :func:`check_env_async`), then, for an id, Gymnasium's checker (:func:`check_gymnasium_api`).

    Args:
        gymnasium_checker: run Gymnasium's checker too (an env object given is closed by the
            contract check, so only an id gets it).

    Raises:
        EnvCheckError: the first broken rule, with the env, instance and fix.
        UnknownEnvError: ``env_id_or_env`` is an unknown id.
    """
    report = asyncio.run(check_env_async(env_id_or_env, env_kwargs=env_kwargs, n_instances=n_instances,
                                         instance_ids=instance_ids, max_steps=max_steps))
    if gymnasium_checker and isinstance(env_id_or_env, str):
        started = time.monotonic()
        check_gymnasium_api(env_id_or_env, env_kwargs=env_kwargs)
        report.gymnasium_checked = True
        report.duration_s += time.monotonic() - started
    return report


def check_gymnasium_api(env_id: str, *, env_kwargs: dict[str, Any] | None = None) -> None:
    """Gymnasium's ``check_env`` on ``gymnasium.make(env_id, **env_kwargs).unwrapped``, through
    the sync API (closed afterwards); a warning it gives fails too.

    It resets with seeds 123 and 456, steps one sampled action twice after the same seeded reset
    and compares observation, reward, flags and info with ``==`` (``data_equivalence``), checks
    that no two calls share an info object, and makes and closes one more env from the spec.

    Raises:
        EnvCheckError: Gymnasium's checker failed or warned; the message quotes it.
        UnknownEnvError: an unknown id.
    """
    from gymnasium.utils.env_checker import check_env as gymnasium_check_env

    from gymfleet.envs.registry import make

    env = make(env_id, **(env_kwargs or {}))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gymnasium_check_env(env.unwrapped)
    except AssertionError as exc:
        hint = (" (values that differ between runs, such as wall times and rollout ids, belong under "
                f"info[{VOLATILE_KEY!r}] as a gymfleet.envs.info.Volatile)") if "info" in str(exc) else ""
        raise _fail(env_id, f"Gymnasium's check_env failed: {exc}{hint}") from exc
    finally:
        env.close()
    said = [re.sub(r"\x1b\[[0-9;]*m", "", str(w.message)) for w in caught  # without the colour codes
            if f"{os.sep}gymnasium{os.sep}" in w.filename]
    if said:
        raise _fail(env_id, f"Gymnasium's check_env warned: {'; '.join(said)}")


async def check_env_async(env_id_or_env: str | AgentEnv, *, env_kwargs: dict[str, Any] | None = None,
                          resources: EnvResources | None = None, n_instances: int = 2,
                          instance_ids: Sequence[str] | None = None, max_steps: int = 100) -> CheckReport:
    """Checks the env contract on ``n_instances`` instances with a gold policy (or
    ``instance_ids``), and closes the env.

    Args:
        env_id_or_env: a registered id (the env is made here, on ``resources`` when given, else
            on its private ones), or an env (checked, then closed).
        env_kwargs: the env's arguments, when made here.
        resources: shared resources for an env made here; leases are checked against them.
        n_instances: how many instances to play (the first ones with a gold policy).
        instance_ids: play these instead.
        max_steps: an episode still running after this many steps fails the check.

    Raises:
        EnvCheckError: the first broken rule.
        UnknownEnvError: an unknown id.
    """
    started = time.monotonic()
    made_here = isinstance(env_id_or_env, str)
    env = (make_agent_env(env_id_or_env, resources, **(env_kwargs or {})) if isinstance(env_id_or_env, str)
           else env_id_or_env)
    shared = resources if made_here else getattr(env, "resources", None)
    before = _Leftovers.now(shared)
    name = env_id_or_env if isinstance(env_id_or_env, str) else (env.spec.id if env.spec else type(env).__name__)
    report = CheckReport(name, 0)
    try:
        _check_static(name, env)
        for instance_id in _pick(name, env, n_instances, instance_ids):
            report.gold_rewards[instance_id] = await _episode(name, env, instance_id, True, max_steps)
            report.noop_rewards[instance_id] = await _episode(name, env, instance_id, False, max_steps)
        report.n_instances = len(report.gold_rewards)
    finally:
        await env.close_async()
    await env.close_async()  # must be idempotent
    _Leftovers.now(shared).check_against(before, name, processes=made_here and resources is None)
    report.duration_s = time.monotonic() - started
    return report


def _fail(env_id: str, what: str) -> EnvCheckError:
    return EnvCheckError(f"{env_id}: {what}")


def _check_static(env_id: str, env: AgentEnv) -> None:
    if not isinstance(env, AgentEnv):
        raise _fail(env_id, f"is a {type(env).__name__}, not a gymfleet AgentEnv: subclass "
                            "gymfleet.envs.base.AgentEnv")
    prompt = env.system_prompt
    if not isinstance(prompt, str) or not prompt.strip():
        raise _fail(env_id, "system_prompt must be non-empty text (the action format and how to finish)")
    if not isinstance(env.noop_action, str):
        raise _fail(env_id, f"noop_action must be a str, not {type(env.noop_action).__name__}")
    known = {*NEEDS, *(n.name for n in env.machine_needs)}
    unknown = sorted(set(env.requires) - known)
    if not isinstance(env.requires, frozenset) or unknown:
        raise _fail(env_id, f"requires must be a frozenset of {sorted(known)} (the sandbox backends' needs and "
                            f"the family's machine_needs); unknown: {unknown}")
    ids = env.instance_ids()
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise _fail(env_id, "instance_ids() must return a non-empty list of str")
    if len(set(ids)) != len(ids):
        raise _fail(env_id, "instance_ids() has repeated ids; each must name one instance")


def _pick(env_id: str, env: AgentEnv, n: int, wanted: Sequence[str] | None) -> list[str]:
    """Instances whose gold policy can be made before any reset (the statelessness check)."""
    chosen: list[str] = []
    for instance_id in wanted if wanted is not None else env.instance_ids():
        try:
            env.gold_policy(instance_id)
        except NotImplementedError:  # a task without a scripted solution (NoGoldPolicyError)
            if wanted is not None:
                raise _fail(env_id, f"{instance_id}: has no gold policy") from None
            continue
        except TypeError as exc:
            raise _fail(env_id, f"gold_policy(instance_id) failed ({exc}): it must take the instance "
                                "id and work without reset (AgentEnv contract)") from exc
        except RuntimeError as exc:
            raise _fail(env_id, f"{instance_id}: gold_policy(instance_id) needs a reset ({exc}): make "
                                "it stateless, built from the instance alone") from exc
        chosen.append(instance_id)
        if wanted is None and len(chosen) == n:
            break
    if not chosen:
        raise _fail(env_id, "no instance has a gold policy: gold_policy(instance_id) must solve at "
                            "least one instance")
    return chosen


async def _episode(env_id: str, env: AgentEnv, instance_id: str, gold: bool, max_steps: int) -> float:
    who = "gold" if gold else "no-op"
    where = f"{instance_id} ({who} episode)"
    policy: Policy = env.gold_policy(instance_id) if gold else ConstantPolicy(env.noop_action)
    obs, info = await env.reset_async(options={"instance_id": instance_id})
    _check_observation(env_id, env, where + " reset", obs, info, instance_id)
    total = 0.0
    for step in range(max_steps):
        action = await policy.act(obs)
        if not isinstance(action, str) or not env.action_space.contains(action):
            raise _fail(env_id, f"{where}: the {who} policy's action at step {step} is not text")
        obs, reward, terminated, truncated, info = await env.step_async(action)
        _check_observation(env_id, env, f"{where} step {step}", obs, info, None)
        if not isinstance(reward, int | float) or isinstance(reward, bool) or not math.isfinite(reward):
            raise _fail(env_id, f"{where} step {step}: reward must be a finite float, got {reward!r}")
        if type(terminated) is not bool or type(truncated) is not bool:
            raise _fail(env_id, f"{where} step {step}: terminated and truncated must be bool, got "
                                f"{type(terminated).__name__}, {type(truncated).__name__}")
        total += float(reward)
        if terminated or truncated:
            break
    else:
        raise _fail(env_id, f"{where}: the episode did not end within {max_steps} steps; end it "
                            "(terminated or truncated) at the env's own turn limit")
    expected = 1.0 if gold else 0.0
    if total != expected:
        raise _fail(env_id, f"{where}: earned {total:g}, must earn {expected:g} "
                            f"({'the gold solution must solve it' if gold else 'doing nothing must not earn reward'});"
                            f" last info: {_short(info)}")
    return total


def _check_observation(env_id: str, env: AgentEnv, where: str, obs: Any, info: Any,
                       instance_id: str | None) -> None:
    if not isinstance(obs, str) or not env.observation_space.contains(obs):
        raise _fail(env_id, f"{where}: the observation must be text, got {type(obs).__name__}")
    if not isinstance(info, dict):
        raise _fail(env_id, f"{where}: info must be a dict, got {type(info).__name__}")
    if VOLATILE_KEY in info and not isinstance(info[VOLATILE_KEY], Volatile):
        raise _fail(env_id, f"{where}: info[{VOLATILE_KEY!r}] must be a gymfleet.envs.info.Volatile (use "
                            f"add_volatile), not a {type(info[VOLATILE_KEY]).__name__} that Gymnasium compares")
    if instance_id is not None and info.get("instance_id") != instance_id:
        raise _fail(env_id, f"{where}: reset's info['instance_id'] must be {instance_id!r}, got "
                            f"{info.get('instance_id')!r}")


def _short(info: dict[str, Any], n_chars: int = 300) -> str:
    text = repr(info)
    return text if len(text) <= n_chars else text[:n_chars] + "..."


@dataclass(frozen=True)
class _Leftovers:
    """What an env could leave behind: leases and contexts of its resources, this process's
    children and Docker containers."""

    leased: int
    contexts: int
    children: frozenset[int]
    containers: frozenset[str]

    @classmethod
    def now(cls, resources: EnvResources | None) -> _Leftovers:
        usage = resources.usage() if resources is not None else None
        return cls(usage.sandboxes_leased if usage else 0, usage.browser_contexts if usage else 0,
                   _children(), _containers())

    def check_against(self, before: _Leftovers, env_id: str, *, processes: bool) -> None:
        if self.leased > before.leased:
            raise _fail(env_id, f"close left {self.leased - before.leased} sandbox(es) leased: release "
                                "the episode's sandbox in close_async")
        if self.contexts > before.contexts:
            raise _fail(env_id, f"close left {self.contexts - before.contexts} browser context(s) open: "
                                "close the episode's context in close_async")
        if new := self.containers - before.containers:
            raise _fail(env_id, f"close left Docker containers behind: {sorted(new)[:3]}")
        if processes and (new_pids := self.children - before.children):
            raise _fail(env_id, f"close left processes behind: {_describe(new_pids)}; stop every "
                                "sandbox, browser and server the env started")


def _children() -> frozenset[int]:
    """Live (not zombie) child processes of this process."""
    me, kids = str(os.getpid()), set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me and fields[0] != "Z":
            kids.add(int(entry.name))
    return frozenset(kids)


def _describe(pids: frozenset[int]) -> str:
    names = []
    for pid in sorted(pids)[:5]:
        try:
            names.append(f"{pid} {Path(f'/proc/{pid}/comm').read_text().strip()}")
        except OSError:
            names.append(str(pid))
    return ", ".join(names)


def _containers() -> frozenset[str]:
    """Docker containers labelled as owned by this process, when a daemon answers."""
    try:
        import docker

        client = docker.from_env(timeout=5)
        try:
            from gymfleet.envs.sandbox.base import LABEL_OWNER_PID

            found = client.containers.list(all=True, filters={"label": f"{LABEL_OWNER_PID}={os.getpid()}"})
            return frozenset(c.id for c in found)
        finally:
            client.close()
    except Exception:  # no daemon, no SDK: nothing of ours can be there
        return frozenset()

"""One harness rollout: the task's sandbox leased, the harness run against its gateway session,
graded, released; recorded from the session's tree of calls (docs/harness.md).

``reset -> open session -> run_harness(base URL) -> grade -> close``, all within the request's
``rollout_timeout_s`` (start-up, the harness's loop and grading; ``close_timeout_s`` more to
release). Classified at the boundary, as ``rollout.py`` does:

==========================================  ==============
what happened                               status
==========================================  ==============
the harness ended (submitted, its limits)   ok (graded)
deadline hit during the policy's command    truncated (graded)
a call lost (engine failure, deadline,      infra_error (never trained on; the reason names
in-process harness's client gone)           the call)
a CLI agent gone during a call (killed:     as the agent's exit says (cli_run.py): graded, and
the policy's commands run where it runs)    trained on once a call was answered
the harness crashed, hung outside a          infra_error
command, or left its thread running
reset/grading failed                        infra_error (sandbox) / env_error
==========================================  ==============

The rollout's trajectory is the session's last leaf, its ``branches`` the earlier leaves (a harness
that edited its history; stored and trained with the sample, docs/harness.md);
:attr:`HarnessRollout.trajectories` holds every leaf with the session's counts in ``metrics``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from gymfleet.core.records import RolloutStatus, Trajectory
from gymfleet.core.errors import SandboxError
from gymfleet.envs.harness.env import HarnessEnv, HarnessOutcome
from gymfleet.orchestrator.gateway import Gateway
from gymfleet.orchestrator.http.tree import SessionRegistry
from gymfleet.orchestrator.protocols import PolicyGateway
from gymfleet.orchestrator.rollout import EnvFactory, Rollout, RolloutRequest

if TYPE_CHECKING:  # the server (starlette) loads only when a run has harness tasks
    from gymfleet.orchestrator.http.server import HttpGateway, HttpGatewayConfig

HARNESS_ENV_ID = "gymfleet/Harness-v0"


class HarnessRollout:
    """Plays one episode through a harness. ``await run()`` returns its trajectory; never raises
    except ``CancelledError`` (everything released first).

    Args:
        request: ids and limits (``rollout_timeout_s`` is the one deadline).
        make_env: a fresh :class:`HarnessEnv`.
        registry: the gateway's sessions.
        server: the HTTP gateway the harness calls.
        dialect: the base URL's dialect (``openai-chat`` for the OpenAI SDK family).
        demonstration: the calls are answered with forced gold replies (the warm start's
            demonstrations): every trajectory is marked ``metrics["demonstration"] = True``.
    """

    def __init__(self, request: RolloutRequest, make_env: Callable[[], HarnessEnv], registry: SessionRegistry,
                 server: HttpGateway, dialect: str = "openai-chat", demonstration: bool = False) -> None:
        self.request, self.make_env, self.registry, self.server, self.dialect = request, make_env, registry, server, dialect
        self.demonstration = demonstration
        self.trajectories: list[Trajectory] = []
        self.trajectory: Trajectory | None = None
        """The rollout's trajectory once ``run`` returned (None if it was cancelled)."""
        self.outcome: HarnessOutcome | None = None

    async def run(self) -> Trajectory:
        """Plays the episode and returns the classified trajectory (the last leaf)."""
        req, start = self.request, time.monotonic()
        session = self.registry.open(req.rollout_id, req.sampling)
        env: HarnessEnv | None = None
        status, reason, reward, info = RolloutStatus.ok, "", 0.0, {}
        try:
            async with asyncio.timeout(req.rollout_timeout_s):
                env = self.make_env()
                task, _ = await env.reset_async(options={"instance_id": req.instance_id, "max_turns": req.max_turns})
                left = req.rollout_timeout_s - (time.monotonic() - start)
                dialect = getattr(env, "dialect", self.dialect)  # a CLI agent speaks its own
                self.outcome = await env.run_harness(task, self.server.base_url(session, dialect), left)
            status, reason = RolloutStatus(self.outcome.status), self.outcome.reason
            reward, info = self.outcome.reward, self.outcome.info
        except TimeoutError:
            status, reason = RolloutStatus.infra_error, f"rollout exceeded rollout_timeout_s={req.rollout_timeout_s:g}"
        except SandboxError as exc:
            status, reason = RolloutStatus.infra_error, f"sandbox failed: {type(exc).__name__}: {exc}"
        except Exception as exc:
            status, reason = RolloutStatus.env_error, f"env failed: {type(exc).__name__}: {exc}"
        finally:
            self.registry.close(session)
            if env is not None:
                await _close(env, req.close_timeout_s)
        in_sandbox = getattr(env, "cli_agent", None) is not None  # the policy can kill that client
        self.trajectories = session.trajectories(req.run_id, req.group_id, req.env_id, req.instance_id,
                                                 client_is_policy=in_sandbox) or [
            Trajectory(req.rollout_id, req.run_id, req.group_id, req.env_id, req.instance_id,
                       metrics=session.metrics())]
        for traj in self.trajectories:
            traj.reward = reward
            if traj.status is RolloutStatus.ok:  # a lost call already says infra_error
                traj.status, traj.reason = status, reason
            traj.metrics.update({k: v for k, v in info.items() if isinstance(v, int | float | str | bool)})
            traj.metrics["harness_exit"] = self.outcome.exit_status if self.outcome else ""
            if self.demonstration:
                traj.metrics["demonstration"] = True
            traj.timings = {"total_s": time.monotonic() - start}
        self.registry.forget(session)
        self.trajectory = self.trajectories[-1]
        return self.trajectory


class HarnessRollouts:
    """The scheduler's ``make_rollout`` for a run with harness tasks: a :class:`HarnessRollout`
    for a task on ``gymfleet/Harness-v0``, the ordinary :class:`Rollout` for every other task, so
    both mix in one run (weights, staleness, quarantine as for any task).

    Args:
        registry: the sessions, over the run's TITO gateway.
        server: the HTTP gateway serving them.
        demonstration: its calls are answered with forced gold (see :class:`HarnessRollout`).
    """

    def __init__(self, registry: SessionRegistry, server: HttpGateway, demonstration: bool = False) -> None:
        self.registry, self.server, self.demonstration = registry, server, demonstration

    def __call__(self, request: RolloutRequest, make_env: EnvFactory, gateway: PolicyGateway) -> Any:
        if request.env_id == HARNESS_ENV_ID:
            return HarnessRollout(request, make_env, self.registry, self.server,  # type: ignore[arg-type]
                                  demonstration=self.demonstration)
        return Rollout(request, make_env, gateway)


@asynccontextmanager
async def open_harness_rollouts(gateway: PolicyGateway, config: HttpGatewayConfig | None = None,
                                demonstration: bool = False) -> AsyncIterator[HarnessRollouts]:
    """Serves ``gateway``'s sessions over HTTP for the run's harness tasks (on loopback).

    Args:
        gateway: the TITO gateway the sessions sample through (for the warm start's
            demonstrations, one over a :class:`~gymfleet.orchestrator.http.forcing.ScriptedRepliesEngine`).
        config: the HTTP server's settings.
        demonstration: mark every trajectory as a demonstration.

    Raises:
        TypeError: ``gateway`` is not the TITO :class:`Gateway`.
    """
    from gymfleet.orchestrator.http.server import HttpGateway

    if not isinstance(gateway, Gateway):
        raise TypeError(f"harness tasks need the TITO gateway, got {type(gateway).__name__}")
    registry = SessionRegistry(gateway)
    async with HttpGateway(registry, config) as server:
        yield HarnessRollouts(registry, server, demonstration)


async def _close(env: HarnessEnv, timeout_s: float) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            await env.close_async()
    except Exception:  # a leaked sandbox is reaped by its expiry label
        pass

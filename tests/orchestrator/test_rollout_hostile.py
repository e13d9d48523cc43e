"""Damage inside the sandbox is the policy's, damage from outside is infrastructure: hostile
policies and a careless operator against real terminal rollouts, on both sandbox backends.

The policy's own damage (``kill -9 -1``, ``pkill sleep``, ``rm -rf /``) never makes an
``infra_error`` (retried, never trained on, five in a row quarantine the task): the rollout ends
ok, graded on what is left (0 here). A container removed mid-command, a sandbox killed from the
host, a missing image are ``infra_error`` with the cause in the reason. Every destructive command
runs through ``inside_only``; every sandbox carries this module's own run id.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gymfleet.core.records import Message, RolloutStatus
from gymfleet.envs.sandbox.base import LABEL_RUN_ID, SandboxBackend
from gymfleet.envs.sandbox.local import LocalBackend, LocalBackendConfig
from gymfleet.envs.sandbox.local_state import read_records
from gymfleet.envs.terminal import TerminalEnv
from gymfleet.orchestrator.rollout import Rollout, RolloutRequest
from tests.envs.sandbox.conftest import inside_only
from tests.orchestrator.fakes import ScriptedGateway

RUN_ID = f"test-hostile-rollout-{os.getpid()}-{uuid.uuid4().hex[:6]}"
TASK = "word-frequency"


def bash(script: str) -> str:
    return f"```bash\n{script}\n```"


def scripted(actions: list[str]) -> ScriptedGateway:
    """A gateway whose policy plays ``actions`` in order (then submits)."""

    def reply(messages: list[Message]) -> str:
        turn = sum(m.role == "assistant" for m in messages)
        return actions[turn] if turn < len(actions) else "submit"

    return ScriptedGateway(reply=reply)


@pytest.fixture(scope="module")
def docker_backend(docker_available: bool) -> Iterator[SandboxBackend]:
    from gymfleet.envs.sandbox.docker import DockerBackend

    backend = DockerBackend()
    yield backend
    backend._gc_sync(RUN_ID, expired_only=False)


@pytest.fixture(scope="module")
def local_backend(bwrap_available: bool, tmp_path_factory: pytest.TempPathFactory) -> LocalBackend:
    return LocalBackend(LocalBackendConfig(state_dir=tmp_path_factory.mktemp("state"), allow_unisolated=False))


@pytest.fixture(params=["docker", "local"])
def backend(request: pytest.FixtureRequest) -> SandboxBackend:
    return request.getfixturevalue(f"{request.param}_backend")


async def roll(backend: SandboxBackend, gateway: ScriptedGateway, *, during: Callable[[], object] | None = None,
               **env_kwargs: object):
    request = RolloutRequest(RUN_ID, f"{RUN_ID}/g", f"{RUN_ID}/g/0/{uuid.uuid4().hex[:6]}", "gymfleet/Terminal-v0",
                             TASK, max_turns=6, turn_timeout_s=120)
    make = lambda: TerminalEnv(sandbox=backend, task_ids=[TASK], run_id=RUN_ID, **env_kwargs)  # noqa: E731
    rollout = asyncio.create_task(Rollout(request, make, gateway).run())
    if during is not None:
        await during()
    return await rollout


# --- inside: the policy's doing --------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.bwrap
async def test_killing_everything_is_the_policys_doing(backend: SandboxBackend) -> None:
    gateway = scripted([bash(inside_only("kill -9 -1; pkill sleep; pkill -9 bash; echo done")), bash("echo still here")])
    traj = await roll(backend, gateway)
    assert traj.status is RolloutStatus.ok and traj.status.trains, traj.reason
    assert traj.reward == 0.0 and traj.metrics["n_turns"] == 3  # both commands, then submit
    assert "still here" in traj.messages[-3].content  # the sandbox went on working


@pytest.mark.docker
@pytest.mark.bwrap
async def test_rm_rf_root_ends_the_episode_as_the_policys_failure(backend: SandboxBackend) -> None:
    gateway = scripted([bash(inside_only("rm -rf --no-preserve-root / 2>/dev/null; true")), bash("ls /"), bash("ls /")])
    traj = await roll(backend, gateway)
    assert traj.status is RolloutStatus.ok and traj.reward == 0.0, traj.reason
    if backend.name == "docker":  # bash is gone: the episode ends there, graded 0 (in a fresh
        # container of the image holding what is left of the workdir: the system files changed)
        assert "damaged its sandbox" in traj.reason and "can no longer start a command" in traj.reason
        assert traj.metrics["n_turns"] == 2
    else:  # the host's tools are read-only binds: only the agent's own files went
        assert traj.reason == "" and traj.metrics["n_turns"] == 4


@pytest.mark.docker
async def test_filling_memory_in_the_background_is_the_policys_damage(docker_backend: SandboxBackend) -> None:
    """tmpfs files count against the memory limit: three 500 MiB files (/tmp, the workdir, the
    output folder: 512 MiB each) written in the
    background have the OOM killer stop the container; the next command finds it stopped, which
    is the policy's damage (before: "stopped from outside", infra_error)."""
    fill = ("nohup sh -c 'for f in /tmp/a /app/b /run/gymfleet-exec/c; do head -c 500M /dev/zero > $f; done' "
            ">/dev/null 2>&1 &")
    gateway = scripted([bash(fill), bash("sleep 60"), bash("ls")])
    traj = await roll(docker_backend, gateway)
    assert traj.status is RolloutStatus.ok and traj.status.trains, traj.reason
    assert traj.reward == 0.0 and "out of memory" in traj.reason, traj.reason


# --- outside: infrastructure -----------------------------------------------------------------


@pytest.mark.docker
async def test_container_removed_mid_command_is_infra(docker_backend: SandboxBackend) -> None:
    client = docker_backend.client()  # type: ignore[attr-defined]

    async def remove_ours() -> None:
        for _ in range(300):
            await asyncio.sleep(0.1)
            ours = await asyncio.to_thread(client.containers.list, filters={"label": f"{LABEL_RUN_ID}={RUN_ID}"})
            top = await asyncio.to_thread(client.api.top, ours[0].id) if ours else {"Processes": []}
            if any("sleep 30" in " ".join(row) for row in top["Processes"] or []):
                break
        for container in ours:
            await asyncio.to_thread(container.remove, force=True)

    traj = await roll(docker_backend, scripted([bash("sleep 30")]), during=remove_ours)
    assert traj.status is RolloutStatus.infra_error and not traj.status.trains
    # `rm -f` kills, then removes: a loaded daemon may show the container stopped in between
    assert re.search("(removed|stopped) from outside", traj.reason) and "not run again" in traj.reason, traj.reason


@pytest.mark.bwrap
async def test_local_sandbox_killed_from_the_host_is_infra(local_backend: LocalBackend) -> None:
    async def kill_ours() -> None:
        for _ in range(300):
            await asyncio.sleep(0.1)
            ours = [r for r in read_records(local_backend.state_dir) if r.run_id == RUN_ID and r.agent_pid]
            if ours:
                break
        await asyncio.sleep(2.0)  # into the command
        for record in ours:
            os.kill(record.agent_pid, signal.SIGKILL)  # our own sandbox's bubblewrap, by its record

    traj = await roll(local_backend, scripted([bash("sleep 30")]), during=kill_ours)
    assert traj.status is RolloutStatus.infra_error, traj.reason
    assert "agent process exited" in traj.reason


@pytest.mark.docker
async def test_missing_image_is_infra(docker_backend: SandboxBackend, tmp_path: Path) -> None:
    traj = await roll(docker_backend, scripted([]), image_prefix="gymfleet-missing/", build_images=False)
    assert traj.status is RolloutStatus.infra_error and "not found" in traj.reason, traj.reason

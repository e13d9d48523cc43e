"""The grader's working room is the grader's: a policy that fills, replaces or locks it gets 0
(or its earned reward), never an infrastructure failure that would dodge the zero."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymfleet.envs.sandbox.base import SandboxBackend
from gymfleet.envs.terminal import TerminalEnv
from tests.envs.terminal.conftest import write_task
from tests.envs.terminal.test_env import bash, play

SOLVE = "echo yes > done.txt; "
HACKS = {  # name: (the agent's commands after solving, reward expected)
    "replaced": ("rm -rf /tmp/.gymfleet && echo x > /tmp/.gymfleet && echo hacked", 1.0),
    "locked": ("chmod 0555 /tmp/.gymfleet && chmod 0555 /tmp 2>/dev/null; echo hacked", 1.0),
    "filled": ("head -c 600M /dev/zero > /tmp/fill 2>/dev/null; "
               "for i in $(seq 2000); do : > /tmp/f$i 2>/dev/null || break; done; echo hacked", 0.0),
}


@pytest.fixture(params=[pytest.param("local", marks=pytest.mark.bwrap),
                        pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest) -> SandboxBackend:
    return request.getfixturevalue(f"{request.param}_backend")


@pytest.mark.parametrize("hack", sorted(HACKS))
async def test_the_grader_room_cannot_be_taken(backend: SandboxBackend, tmp_path: Path, hack: str) -> None:
    write_task(tmp_path, "done")
    script, reward = HACKS[hack]
    env = TerminalEnv(sandbox=backend, tasks_dir=tmp_path)
    steps = await play(env, [bash(SOLVE + script), "submit"])
    assert "hacked" in steps[0][0], steps[0][0]
    obs, got, terminated, _, info = steps[-1]
    assert terminated and got == reward, (obs, info)
    if hack == "filled":
        assert "full" in info["grading_error"], info
    await env.close_async()

"""Every built-in task on the Docker backend (image images/terminal): gold solution 1, no-op 0.

The backend-dependent episode behaviour (persistence, timeouts, tampering) runs on Docker too,
from test_env.py."""

from __future__ import annotations

import pytest

from gymfleet.envs.sandbox.base import SandboxBackend
from tests.envs.terminal.tasks_check import BUILTIN_TASK_IDS, check_gold_and_noop

pytestmark = pytest.mark.docker


@pytest.mark.parametrize("task_id", BUILTIN_TASK_IDS)
async def test_gold_1_noop_0(docker_backend: SandboxBackend, task_id: str) -> None:
    await check_gold_and_noop(docker_backend, task_id)

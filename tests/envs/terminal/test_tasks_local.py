"""Every built-in task on the bubblewrap backend: gold solution 1, no-op 0."""

from __future__ import annotations

import pytest

from gymfleet.envs.sandbox.local import LocalBackend
from tests.envs.terminal.tasks_check import BUILTIN_TASK_IDS, check_gold_and_noop

pytestmark = pytest.mark.bwrap


@pytest.mark.parametrize("task_id", BUILTIN_TASK_IDS)
async def test_gold_1_noop_0(local_backend: LocalBackend, task_id: str) -> None:
    await check_gold_and_noop(local_backend, task_id)

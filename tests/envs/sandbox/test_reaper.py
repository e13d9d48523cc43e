"""The periodic reaper keeps sweeping, through failures, until cancelled."""

from __future__ import annotations

import asyncio

from gymfleet.envs.sandbox.reaper import reap_forever
from tests.envs.sandbox.fakes import FakeBackend


async def test_reaper_sweeps_on_a_timer_and_survives_a_failure() -> None:
    backend = FakeBackend()
    task = asyncio.create_task(reap_forever(backend, every_s=0.01))
    await asyncio.sleep(0.2)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    assert task.cancelled() and backend.gc_calls >= 3

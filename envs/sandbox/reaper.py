"""The periodic reaper: sweeps a backend's expired and orphaned sandboxes while a run lasts.

Backends sweep once when made (``LocalBackend``); a long run also calls :func:`reap_forever`
in its task group, so that sandboxes left by crashed workers do not pile up::

    async with asyncio.TaskGroup() as tg:
        tg.create_task(reap_forever(backend, every_s=300))
"""

from __future__ import annotations

import asyncio
import logging

from gymfleet.envs.sandbox.base import SandboxBackend

log = logging.getLogger(__name__)


async def reap_forever(
    backend: SandboxBackend, every_s: float = 300.0, run_id: str | None = None
) -> None:
    """Calls ``backend.gc(run_id=run_id)`` every ``every_s`` seconds until cancelled.

    A failed sweep is logged and retried at the next tick: it must never stop a run.
    """
    while True:
        await asyncio.sleep(every_s)
        try:
            removed = await backend.gc(run_id=run_id)
        except Exception as exc:  # a reaper that dies would leak every later orphan
            log.warning("sandbox reaper (%s): sweep failed: %s", backend.name, exc)
            continue
        if removed:
            log.info("sandbox reaper (%s): removed %d sandboxes", backend.name, removed)

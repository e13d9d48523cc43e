"""Following an adapter bucket: each new committed version is hot-loaded into the gateway.

A training job follows its own learner's bucket; ``gymfleet collect`` follows one when it is a
shard of a run whose learner runs elsewhere (``gymfleet learn``): the bucket URL is what joins
them. Rollouts started after a load sample with the new version and are stamped with it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rich.console import Console

from gymfleet.core.errors import GymfleetError
from gymfleet.run.report import AdapterLoad
from gymfleet.trainer import Bucket

log = logging.getLogger(__name__)


class AdapterGateway(Protocol):
    """What the follower needs of :class:`gymfleet.orchestrator.gateway.Gateway`."""

    @property
    def policy_version(self) -> int: ...

    async def publish_adapter(self, version: int, path: str) -> str: ...


@dataclass
class BucketFollower:
    """Hot-loads a bucket's newest committed version when it is newer than the gateway's.

    Attributes:
        bucket: where the learner publishes.
        local_dir: where versions of a remote bucket are copied for the engines to read.
        loads: every load done, with its duration (seconds).
        step: the learner step of the newest version loaded (its ``meta.json``), 0 before any.
    """

    bucket: Bucket
    local_dir: Path
    console: Console | None = None
    loads: list[AdapterLoad] = field(default_factory=list)
    step: int = 0

    async def load_newest(self, gateway: AdapterGateway) -> AdapterLoad | None:
        """Loads the newest committed version if the gateway serves an older one.

        Returns:
            The load, or None when there was nothing newer.

        Raises:
            AdapterPublishError: a replica failed to load it (the previous version stays served).
            BucketError: the version vanished or does not match its manifest while copied.
        """
        latest = await asyncio.to_thread(self.bucket.latest)
        if latest is None or latest.version <= gateway.policy_version:
            return None
        path = latest.url
        if not Path(path).exists():  # a remote bucket: engines read a local copy
            path = str(await asyncio.to_thread(self.bucket.fetch, latest.version, self.local_dir))
        t0 = time.monotonic()
        await gateway.publish_adapter(latest.version, path)
        load = AdapterLoad(time.time(), latest.version, time.monotonic() - t0)
        self.loads.append(load)
        self.step = int(latest.meta.get("step", 0))
        if self.console is not None:
            self.console.print(f"[green]policy v{latest.version}[/green] loaded (learner step {self.step})")
        return load

    async def follow(self, gateway: AdapterGateway, interval_s: float) -> None:
        """Looks every ``interval_s`` seconds and loads each new version, until cancelled. A
        version that fails to load (a replica refused it, the copy failed) is logged and tried
        again at the next look; the previous version stays served."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.load_newest(gateway)
            except GymfleetError as exc:
                log.warning("adapter not loaded, trying again in %.1f s: %s", interval_s, exc)

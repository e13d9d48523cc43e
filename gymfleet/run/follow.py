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
from rich.markup import escape
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from gymfleet.core.errors import GymfleetError, InferenceError
from gymfleet.run.config import AdapterLoadConfig
from gymfleet.run.records import AdapterLoad, AdapterLoadFailure
from gymfleet.trainer import Bucket, BucketCorruptError, PublishedAdapter

log = logging.getLogger(__name__)


class AdapterGateway(Protocol):
    """What the follower needs of :class:`gymfleet.orchestrator.gateway.Gateway`."""

    @property
    def policy_version(self) -> int: ...

    async def publish_adapter(self, version: int, path: str) -> str: ...


@dataclass
class BucketFollower:
    """Hot-loads a bucket's newest committed version when it is newer than the gateway's.

    A load that fails (an ``InferenceError`` such as ``AdapterPublishError`` from replicas that
    refuse or time out, or ``retries.timeout_s``) is tried ``retries.attempts`` times
    (tenacity), then the version is skipped for good: the gateway keeps serving the previous one,
    so rollouts stay stamped with the version they sampled, and the next published version is
    tried.

    Attributes:
        bucket: where the learner publishes.
        local_dir: where versions of a remote bucket are copied for the engines to read.
        fetch_remote: copy a remote bucket's version into ``local_dir`` before the load; False:
            hand the engines the version's URL (replicas that copy from the bucket themselves,
            ``VLLMEngineConfig.replica_reads_urls``).
        retries: tries per version, the wait between them and the limit of one try.
        loads: every load done, with its duration (seconds).
        failures: every version skipped, with why.
        step: the learner step of the newest version seen (its ``meta.json``), 0 before any.
    """

    bucket: Bucket
    local_dir: Path
    console: Console | None = None
    retries: AdapterLoadConfig = field(default_factory=AdapterLoadConfig)
    loads: list[AdapterLoad] = field(default_factory=list)
    failures: list[AdapterLoadFailure] = field(default_factory=list)
    step: int = 0
    skipped: set[int] = field(default_factory=set)
    fetch_remote: bool = True

    async def load_newest(self, gateway: AdapterGateway) -> AdapterLoad | None:
        """Loads the newest committed version if the gateway serves an older one.

        Returns:
            The load, or None when there was nothing newer or it was skipped.

        Raises:
            BucketError: the version vanished or does not match its manifest while copied.
        """
        found, corrupt = await asyncio.to_thread(self._newest_good, gateway.policy_version)
        for version, exc in corrupt:
            self._skip(version, exc, gateway.policy_version, attempts=1)
        if found is None:
            return None
        latest, path = found
        self.step = int(latest.meta.get("step", 0))
        opts = self.retries
        t0 = time.monotonic()
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(opts.attempts), wait=wait_fixed(opts.retry_wait_s), reraise=True,
                retry=retry_if_exception_type((InferenceError, TimeoutError)),
                before_sleep=lambda state: log.warning("loading adapter v%d failed (try %d of %d): %s; retrying",
                                                       latest.version, state.attempt_number, opts.attempts,
                                                       state.outcome.exception() if state.outcome else "?"),
            ):
                with attempt:
                    t0 = time.monotonic()
                    async with asyncio.timeout(opts.timeout_s):
                        await gateway.publish_adapter(latest.version, path)
        except (InferenceError, TimeoutError) as exc:
            self._skip(latest.version, exc if str(exc) else TimeoutError(f"no answer within {opts.timeout_s} s"),
                       gateway.policy_version)
            return None
        load = AdapterLoad(time.time(), latest.version, time.monotonic() - t0)
        self.loads.append(load)
        if self.console is not None:
            self.console.print(f"[green]policy v{latest.version}[/green] loaded (learner step {self.step})")
        return load

    def _newest_good(self, serving: int) -> tuple[tuple[PublishedAdapter, str] | None, list[tuple[int, BaseException]]]:
        """The newest committed version past ``serving`` whose files match their manifest
        (SHA-256, checked before any engine loads it, as the learner checks before it resumes),
        with the path the engines load (a checked local copy; the bucket URL for replicas that
        copy and check it themselves), and the newer versions that did not match."""
        corrupt: list[tuple[int, BaseException]] = []
        for adapter in self.bucket.committed_newest_first():
            if adapter.version <= serving:
                break
            if adapter.version in self.skipped:
                continue
            if not self.fetch_remote:
                return (adapter, adapter.url), corrupt
            try:
                return (adapter, str(self.bucket.fetch(adapter.version, self.local_dir, only_served=True))), corrupt
            except BucketCorruptError as exc:
                corrupt.append((adapter.version, exc))
        return None, corrupt

    def _skip(self, version: int, exc: BaseException, serving: int, attempts: int | None = None) -> None:
        attempts = attempts or self.retries.attempts
        self.skipped.add(version)
        self.failures.append(AdapterLoadFailure(time.time(), version, attempts, f"{type(exc).__name__}: {exc}"))
        log.warning("adapter v%d skipped after %d tries (%s); v%d keeps being served", version, attempts, exc, serving)
        if self.console is not None:
            self.console.print(f"[yellow]policy v{version} skipped[/yellow] after {attempts} failed load(s) "
                               f"({escape(f'{type(exc).__name__}: {exc}')}); v{serving} keeps being served, the run "
                               "goes on (adapter_load.attempts / timeout_s, policy.router.adapter_timeout_s)")

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

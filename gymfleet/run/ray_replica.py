"""The embedded inference replica of ``train --cluster`` as a Ray actor (:class:`ReplicaRole`),
and the two listeners it serves on, as ``gymfleet serve`` does.

* **Inference** (``/v1/completions``, ``/v1/models``, ``/health``...) on the node's address, for
  the shards wherever they run; it serves no admin route (404).
* **Admin** (``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter``) on a port of its own on the
  node's address, answering only requests that carry the run's admin token
  (``Authorization: Bearer``; 401 otherwise, 403 from a web page): a random token the launcher
  makes per run and hands to the replicas and to the shards' engine configs (``admin_token``,
  ``admin_url``) through Ray, never over HTTP, so a browser task's page cannot know it.
  ``gymfleet serve`` puts admin on a unix socket instead; a replica actor's shard may run on
  another node, which a unix socket does not reach.

Both listeners run as two uvicorn servers on one event loop in one thread of the actor.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from gymfleet.core.errors import ConfigError
from gymfleet.orchestrator import RunConfig, TransformersEngineConfig, VLLMEngineConfig
from gymfleet.run.config import ClusterConfig
from gymfleet.run.records import ReplicaStats

SERVED_MODEL = "base"
"""The base model's name on the replica actors (requests' ``model`` without an adapter)."""


def admin_token() -> str:
    """A fresh admin token for a run's replica actors (256 random bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


class ReplicaListeners:
    """An engine served on two TCP listeners of ``host``, inference and admin (token required),
    in a daemon thread; started on construction.

    Args:
        engine: the replica's engine (a :class:`~gymfleet.orchestrator.TransformersEngine`).
        host: the address both listen on (the node's).
        port: the inference port (0: any free one).
        admin_port: the admin port (0: any free one).
        token: the bearer token the admin routes ask for.
        adapter_cache: where adapters given as fsspec URLs are copied before they load.

    Attributes:
        url: the inference listener's base URL, ``http://HOST:PORT``.
        admin_url: the admin listener's base URL.

    Raises:
        OSError: a port cannot be bound (in use).
    """

    def __init__(self, engine: Any, host: str, port: int, admin_port: int, token: str,
                 adapter_cache: Path | None = None) -> None:
        import uvicorn

        from gymfleet.orchestrator import build_admin_app, build_app

        socks = [_bind(host, port), _bind(host, admin_port)]
        self.url, self.admin_url = (f"http://{host}:{s.getsockname()[1]}" for s in socks)
        apps = [build_app(engine, SERVED_MODEL, adapter_cache=adapter_cache, admin=False),
                build_admin_app(engine, adapter_cache=adapter_cache, admin_token=token)]
        self._servers = [uvicorn.Server(uvicorn.Config(app, log_level="warning")) for app in apps]
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(socks),), daemon=True,
                                        name=f"replica-{self.url}")
        self._thread.start()

    async def _serve(self, socks: list[socket.socket]) -> None:
        await asyncio.gather(*(s.serve(sockets=[sock]) for s, sock in zip(self._servers, socks)))

    def wait_started(self, timeout_s: float = 120.0) -> None:
        """Returns once both listeners accept requests.

        Raises:
            RuntimeError: a listener stopped, or they did not start within ``timeout_s`` seconds.
        """
        deadline = time.monotonic() + timeout_s
        while not all(s.started for s in self._servers):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"replica {self.url} did not start")
            time.sleep(0.05)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stops both listeners and waits up to ``timeout_s`` seconds for the thread."""
        for server in self._servers:
            server.should_exit = True
        self._thread.join(timeout_s)


class ReplicaRole:
    """A Ray actor: one embedded inference replica (``gymfleet serve``'s apps) on its node's
    address, inference and admin on two listeners (:class:`ReplicaListeners`).

    Adapters given as URLs are copied from the bucket into a folder of the replica's own, so the
    replica needs no file system shared with its shard. Listening starts in ``__init__`` (again
    after a restart); :meth:`address` says where once the servers are up.

    Args:
        engine: the engine's config (:func:`replica_engine`).
        port: the inference port (0: any free one).
        admin_port: the admin port (0: any free one).
        token: the run's admin token (:func:`admin_token`).
    """

    def __init__(self, engine: dict[str, JsonValue], port: int = 0, admin_port: int = 0,
                 token: str | None = None) -> None:
        import ray

        from gymfleet.orchestrator import TransformersEngine

        if not token:
            raise ConfigError("a replica actor needs the run's admin token (its admin routes take no request without it)")
        config = TransformersEngineConfig.model_validate(engine)
        self._engine = TransformersEngine(config)
        host = ray.util.get_node_ip_address()
        cache = Path(tempfile.gettempdir()) / f"gymfleet-{config.name}-adapters-{port or 'any'}"
        shutil.rmtree(cache, ignore_errors=True)  # what an earlier start on this port left
        self._listeners = ReplicaListeners(self._engine, host, port, admin_port, token, cache)

    def address(self, timeout_s: float = 120.0) -> tuple[str, str]:
        """The replica's inference and admin base URLs (``http://IP:PORT``), once both accept requests.

        Raises:
            RuntimeError: a server stopped, or did not start within ``timeout_s`` seconds.
        """
        self._listeners.wait_started(timeout_s)
        return self._listeners.url, self._listeners.admin_url

    def stats(self) -> ReplicaStats:
        """What this replica did since its (re)start, and the adapters it holds now."""
        return ReplicaStats(self._listeners.url, self._engine.stats.n_generated_tokens,
                            self._engine.stats.n_forward_passes, sorted(self._engine.adapters))


def replica_ports(cl: ClusterConfig, index: int, n_replicas: int) -> tuple[int, int]:
    """Replica ``index``'s inference and admin ports: ``replica_port + index`` and
    ``replica_port + n_replicas + index`` (so a replica Ray restarts on the same node comes back
    at the same URLs), or (0, 0) (any free ports) when ``cluster.replica_port`` is 0."""
    if not cl.replica_port:
        return 0, 0
    return cl.replica_port + index, cl.replica_port + n_replicas + index


def replica_engine(run: RunConfig, cl: ClusterConfig, index: int) -> dict[str, JsonValue]:
    """The engine config of replica actor ``index``: the run's first ``kind: transformers``
    engine (or the default one), named ``replica-<index>``, with ``cluster.replica_cpus`` threads
    unless it sets its own.

    Raises:
        ConfigError: ``policy.engines`` lists engines of another kind (vLLM replicas are not
            placed as actors: launch them per shard, or list running ones).
    """
    others = [e.kind for e in run.policy.engines if not isinstance(e, TransformersEngineConfig)]
    if others:
        raise ConfigError(f"cluster.replicas_per_shard places embedded replicas, but policy.engines lists "
                          f"{', '.join(sorted(set(others)))} engines: set cluster.replicas_per_shard: 0 (each "
                          "shard then uses policy.engines itself), or list only kind: transformers engines")
    engines = [e for e in run.policy.engines if isinstance(e, TransformersEngineConfig)]
    base = engines[0] if engines else TransformersEngineConfig(source=run.policy.model)
    return base.model_copy(update={"name": f"replica-{index}",
                                   "n_threads": base.n_threads or max(1, int(cl.replica_cpus))}).model_dump(mode="json")


def shard_policy_engines(addresses: list[tuple[str, str]], first: int, token: str) -> list[dict[str, JsonValue]]:
    """A shard's ``policy.engines`` when it uses replica actors: each (inference URL, admin URL)
    as an HTTP replica (``kind: vllm``, the API gymfleet serve speaks) that copies adapters from
    the bucket itself, sending load/unload to its admin URL with the run's token.

    The token is written in clear (``SecretStr`` would dump it as ``**********``): the dict only
    crosses to the shard's actor through Ray."""
    return [VLLMEngineConfig(base_url=url, admin_url=admin, model=SERVED_MODEL, name=f"replica-{first + i}",
                             replica_reads_urls=True).model_dump(mode="json", exclude_defaults=True)
            | {"kind": "vllm", "admin_token": token} for i, (url, admin) in enumerate(addresses)]

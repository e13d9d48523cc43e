"""VLLMEngine: the only module that speaks vLLM's OpenAI-compatible HTTP API.

It needs a server started as :mod:`~gymfleet.orchestrator.engines.vllm_launcher` starts one
(``gymfleet serve --backend vllm``, or ``launch: true`` in a run config), in short::

    VLLM_ALLOW_RUNTIME_LORA_UPDATING=True python -m vllm.entrypoints.openai.api_server \
        --model DIR --enable-lora --logprobs-mode processed_logprobs --enable-prompt-tokens-details

``processed_logprobs`` makes vLLM report logprobs after temperature and top-p, the quantity
defined in :mod:`gymfleet.core.sampling` (vLLM's default, ``raw_logprobs``, is
before temperature and would bias the learner's importance ratio). ``gymfleet serve`` speaks the
same subset, so this client is tested against it.

Endpoints used (vLLM docs, "OpenAI-Compatible Server" and "LoRA Adapters / Dynamically serving
LoRA Adapters"):

* ``POST /v1/completions`` with ``prompt`` as a list of token ids, ``model`` = base model or a
  loaded LoRA name, ``logprobs`` and ``return_tokens_as_token_ids`` (tokens come back as
  ``"token_id:<id>"``), ``include_stop_str_in_output`` (the stop text is kept, as in
  :class:`~gymfleet.core.records.SamplingParams`).
* ``POST /v1/load_lora_adapter`` ``{"lora_name", "lora_path"}``; ``POST /v1/unload_lora_adapter``
  ``{"lora_name"}``.
* ``GET /health``.
* Full weights (a learner with ``learner.adapter: none``; vLLM has no hot swap for them): on a
  server started with ``VLLM_SERVER_DEV_MODE=1`` (``server.full_weights``), ``POST
  /pause?mode=wait`` (requests in flight finish, new ones wait), ``POST /collective_rpc``
  ``{"method": "reload_weights", "kwargs": {"weights_path": DIR}}`` (every worker loads the
  version's safetensors in place), ``POST /reset_prefix_cache``, ``POST /resume``. Chosen over a
  restart with the new weights, which stops serving for the server's whole start-up (docs/train.md
  gives both, measured).

Adapters: vLLM reads ``lora_path`` from its own disk. For a replica on another machine, set
``adapter_dir`` and each adapter is first copied there from the bucket
(:func:`~gymfleet.orchestrator.engines.adapters.copy_adapter`); see ``docs/vllm.md``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import httpx
from pydantic import Field, SecretStr, model_validator

from gymfleet.core.records import Generation, SamplingParams
from gymfleet.core.strict import StrictModel
from gymfleet.orchestrator.engines.adapters import adapter_version, copy_adapter, is_full_weights, is_remote
from gymfleet.orchestrator.engines.errors import (
    AdapterError,
    ContextLengthError,
    ReplicaServerError,
    ReplicaTimeoutError,
    ReplicaUnavailableError,
    RequestError,
    UnknownAdapterError,
)
from gymfleet.orchestrator.engines.limits import MOVED_TO_ROUTER, ReplicaLimits
from gymfleet.orchestrator.engines.vllm_launcher import VLLMServerConfig

SESSION_HEADER = "X-Gymfleet-Session"
"""Carries the routing key; vLLM ignores it (its prefix cache needs no key), gymfleet serve uses it."""
TOKEN_ID_PREFIX = "token_id:"


class VLLMEngineConfig(StrictModel):
    """One vLLM replica to use (``base_url``), or ``replicas`` of them to launch (``launch: true``)."""

    kind: Literal["vllm"] = "vllm"
    """Selects this engine in ``policy.engines``."""
    base_url: str | None = None
    """e.g. ``http://127.0.0.1:8000`` (no ``/v1``); required unless ``launch``."""
    model: str | None = None
    """The served base model name (``--served-model-name`` or the model path); required unless
    ``launch`` (launched servers serve ``server.served_model_name``)."""
    name: str | None = None
    """Replica name; defaults to ``base_url`` (``<name>-<i>`` for launched replicas when set)."""
    launch: bool = False
    """Start the servers here (:mod:`~gymfleet.orchestrator.engines.vllm_launcher`) for the run's
    duration, instead of connecting to running ones."""
    replicas: int = Field(default=1, ge=1)
    """How many servers to launch (with ``launch``)."""
    server: VLLMServerConfig = Field(default_factory=VLLMServerConfig)
    """The launched servers' flags (with ``launch``): dtype, context, KV cache, LoRA slots, threads."""
    connect_timeout_s: float = Field(default=5.0, gt=0)
    """Limit for opening a connection (the limits of whole calls are the router's,
    ``policy.router``: :class:`~gymfleet.orchestrator.engines.limits.ReplicaLimits`)."""
    adapter_dir: str | None = None
    """A folder on the replica's disk, as an fsspec URL this process can write (a path for a
    replica on this machine, ``sftp://host/var/cache/gymfleet/adapters`` for one elsewhere):
    each adapter is copied there before ``load_lora_adapter``. None: vLLM is handed the path as
    published, which it must be able to read (same machine, or a shared filesystem)."""
    adapter_dir_on_replica: str | None = None
    """``adapter_dir`` as the replica itself sees it; None: the path part of ``adapter_dir``."""
    admin_token: SecretStr | None = None
    """Sent as ``Authorization: Bearer`` with every request: the admin token of a ``gymfleet
    serve`` replica (the content of its ``--admin-token-file``), or a vLLM server's ``--api-key``.
    None: no header (a server without a token)."""
    admin_socket: str | None = None
    """The replica's admin listener, a unix-domain socket path on this machine (``gymfleet serve
    --admin-socket``): adapter load/unload requests go there, everything else to ``base_url``.
    None: all requests to ``base_url`` (a vLLM server), or to ``admin_url``."""
    admin_url: str | None = None
    """The replica's admin listener over TCP (``train --cluster``'s replica actors: a port of its
    own that asks for ``admin_token``): adapter load/unload requests go there, everything else to
    ``base_url``. None: see ``admin_socket``."""
    replica_reads_urls: bool = False
    """The replica copies an adapter given as an fsspec URL from the bucket itself (``gymfleet
    serve`` replicas made with an adapter cache, such as ``train --cluster``'s replica actors; vLLM
    does not): a remote path is passed through instead of refused."""

    @model_validator(mode="before")
    @classmethod
    def _limits_are_the_routers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, router_key in MOVED_TO_ROUTER.items():
                if key in data:
                    raise ValueError(f"{key} is not an engine setting: the router owns per-replica limits; "
                                     f"set policy.router.{router_key} instead")
        return data

    @model_validator(mode="after")
    def _where(self) -> VLLMEngineConfig:
        if not self.launch and (not self.base_url or not self.model):
            raise ValueError("a vllm engine needs base_url and model (a running server), or launch: true")
        if not self.launch and self.replicas != 1:
            raise ValueError("replicas counts launched servers: set launch: true, or list one engine per base_url")
        if not self.launch and "server" in self.model_fields_set:
            raise ValueError("server: flags of servers launched here; set launch: true, or drop server for a running one")
        if self.adapter_dir_on_replica and not self.adapter_dir:
            raise ValueError("adapter_dir_on_replica needs adapter_dir (where to copy adapters to)")
        if self.launch and self.admin_socket:
            raise ValueError("admin_socket is a gymfleet serve replica's (--admin-socket); launched vLLM servers "
                             "take admin requests on their port: drop admin_socket")
        if self.admin_url and (self.admin_socket or self.launch):
            raise ValueError("admin_url is a replica actor's admin listener: drop admin_socket / launch")
        if self.replica_reads_urls and self.adapter_dir:
            raise ValueError("replica_reads_urls: the replica copies adapters itself; drop adapter_dir")
        return self


class VLLMEngine:
    """An :class:`~gymfleet.orchestrator.protocols.Engine` that is the HTTP client of one replica.

    Every HTTP status is checked: 400 on a too-long prompt raises ContextLengthError, 404 on an
    unknown model raises UnknownAdapterError, other 4xx RequestError, 5xx ReplicaServerError;
    timeouts raise ReplicaTimeoutError and connection failures ReplicaUnavailableError.
    Use as an async context manager (or call :meth:`aclose`).
    """

    def __init__(self, config: VLLMEngineConfig, transport: httpx.AsyncBaseTransport | None = None, *,
                 limits: ReplicaLimits | None = None) -> None:
        """Args: ``config``; ``transport`` (tests); ``limits``: the router's per-call limits
        (``policy.router``; default :class:`ReplicaLimits`'s defaults)."""
        if not config.base_url or not config.model:
            raise ValueError("VLLMEngine needs base_url and model (launched servers fill them in)")
        self.config = config
        self.limits = limits or ReplicaLimits()
        self.name = config.name or config.base_url
        timeout = httpx.Timeout(self.limits.request_timeout_s, connect=config.connect_timeout_s)
        headers = {"Authorization": f"Bearer {config.admin_token.get_secret_value()}"} if config.admin_token else None
        self._client = httpx.AsyncClient(base_url=config.base_url, timeout=timeout, transport=transport,
                                         headers=headers)
        self._full: set[str] = set()
        """Names of the full-weight versions loaded (the server holds the newest's weights)."""
        self._admin_client = self._client
        if config.admin_socket:  # ``transport`` (tests) stands in for the socket too
            self._admin_client = httpx.AsyncClient(
                base_url="http://replica-admin", timeout=timeout, headers=headers,
                transport=transport or httpx.AsyncHTTPTransport(uds=config.admin_socket))
        elif config.admin_url:
            self._admin_client = httpx.AsyncClient(base_url=config.admin_url, timeout=timeout, headers=headers,
                                                   transport=transport)

    async def __aenter__(self) -> VLLMEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the connection pools."""
        await self._client.aclose()
        if self._admin_client is not self._client:
            await self._admin_client.aclose()

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        adapter: str | None = None,
        routing_key: str | None = None,
    ) -> Generation:
        """Sends one token-id completion request; see the class docstring for errors."""
        body: dict[str, Any] = {
            "model": self.config.model if adapter is None or adapter in self._full else adapter,
            "prompt": list(prompt_ids),
            "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 1,
            "return_tokens_as_token_ids": True,
            "include_stop_str_in_output": True,
        }
        if sampling.stop:
            body["stop"] = sampling.stop
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        headers = {SESSION_HEADER: routing_key} if routing_key else {}
        response = await self._request("POST", "/v1/completions", json=body, headers=headers)
        if response.status_code == 404:
            raise UnknownAdapterError(f"{self.name}: {_error_message(response)} (load the adapter first)")
        if response.status_code == 400 and "context" in _error_message(response).lower():
            raise ContextLengthError(f"{self.name}: {_error_message(response)}")
        _raise_for_status(self.name, response)
        return self._parse_completion(response, adapter)

    async def load_adapter(self, name: str, path: str) -> None:
        """``POST /v1/load_lora_adapter``, after copying the adapter to ``adapter_dir`` if set; a
        full-weight version (:func:`~gymfleet.orchestrator.engines.adapters.is_full_weights`)
        replaces the server's weights instead (module docstring), and later requests naming it
        go to the base model name.

        Args:
            name: the versioned adapter name.
            path: the adapter folder: a local path, or any fsspec URL when ``adapter_dir`` is set.

        Raises:
            AdapterError: the replica refuses, the copy fails, or ``path`` is remote and there is
                no ``adapter_dir`` to copy it to.
        """
        full = await asyncio.to_thread(is_full_weights, path)
        path = await self._replica_path(name, path)
        if full:
            await self._reload_weights(name, path)
            self._full.add(name)
            return
        body = {"lora_name": name, "lora_path": path}
        response = await self._request("POST", "/v1/load_lora_adapter", json=body, timeout=self.limits.adapter_timeout_s,
                                       admin=True)
        if response.status_code != 200:
            raise AdapterError(f"{self.name}: loading {name!r} failed ({response.status_code}): {_error_message(response)}")

    async def _reload_weights(self, name: str, path: str) -> None:
        """Pause, reload every worker's weights from ``path``, drop the prefix cache, resume."""
        timeout = self.limits.adapter_timeout_s
        paused = await self._request("POST", "/pause", params={"mode": "wait"}, timeout=timeout)
        if paused.status_code == 404:
            raise AdapterError(f"{self.name}: loading full weights {name!r} needs a server started with "
                               "VLLM_SERVER_DEV_MODE=1 (server.full_weights: true), which this one was not")
        if paused.status_code != 200:
            raise AdapterError(f"{self.name}: pausing for {name!r} failed ({paused.status_code}): {_error_message(paused)}")
        try:
            body = {"method": "reload_weights", "kwargs": {"weights_path": path}}
            reloaded = await self._request("POST", "/collective_rpc", json=body, timeout=timeout)
            if reloaded.status_code != 200:
                raise AdapterError(f"{self.name}: reloading weights {name!r} from {path} failed "
                                   f"({reloaded.status_code}): {_error_message(reloaded)}")
            reset = await self._request("POST", "/reset_prefix_cache", timeout=timeout)
            if reset.status_code != 200 or reset.json().get("success") is not True:
                raise AdapterError(f"{self.name}: the prefix cache was not reset after {name!r} "
                                   f"({reset.status_code}): {reset.text[:300]}")
        finally:
            resumed = await self._request("POST", "/resume", timeout=timeout)
            if resumed.status_code != 200:
                raise AdapterError(f"{self.name}: resuming after {name!r} failed ({resumed.status_code}): "
                                   f"{_error_message(resumed)}")

    async def unload_adapter(self, name: str) -> None:
        """``POST /v1/unload_lora_adapter``. Raises UnknownAdapterError (404) or AdapterError.
        A full-weight version's name is only forgotten (the server keeps the newest weights)."""
        if name in self._full:
            self._full.discard(name)
            return
        body = {"lora_name": name}
        response = await self._request("POST", "/v1/unload_lora_adapter", json=body,
                                       timeout=self.limits.adapter_timeout_s, admin=True)
        if response.status_code == 404:
            raise UnknownAdapterError(f"{self.name}: {_error_message(response)}")
        if response.status_code != 200:
            raise AdapterError(f"{self.name}: unloading {name!r} failed ({response.status_code}): {_error_message(response)}")

    async def _replica_path(self, name: str, path: str) -> str:
        """Where the replica reads the adapter: ``path`` itself, or its copy in ``adapter_dir``."""
        if not self.config.adapter_dir:
            if self.config.replica_reads_urls:
                return path
            if is_remote(path):
                raise AdapterError(
                    f"{self.name}: vLLM reads adapters from its own disk, not {path}: set adapter_dir "
                    "(a folder on the replica's disk) so that gymfleet copies each adapter there first"
                )
            return path.removeprefix("file://")
        try:
            copied = await asyncio.to_thread(copy_adapter, path, self.config.adapter_dir, name)
        except (OSError, ValueError) as exc:
            raise AdapterError(f"{self.name}: copying {name!r} from {path} to {self.config.adapter_dir} failed: {exc}") from exc
        on_replica = self.config.adapter_dir_on_replica
        return f"{on_replica.rstrip('/')}/{name}" if on_replica else copied

    async def health(self) -> bool:
        """``GET /health``: True on 200, False on any other status or failure."""
        try:
            response = await self._request("GET", "/health", timeout=self.limits.health_timeout_s)
        except (ReplicaTimeoutError, ReplicaUnavailableError, ReplicaServerError):
            return False
        return response.status_code == 200

    async def _request(self, method: str, url: str, timeout: float | None = None, admin: bool = False,
                       **kwargs: Any) -> httpx.Response:
        if timeout is not None:
            kwargs["timeout"] = httpx.Timeout(timeout, connect=self.config.connect_timeout_s)
        client = self._admin_client if admin else self._client
        try:
            return await client.request(method, url, **kwargs)
        except httpx.TimeoutException as exc:
            raise ReplicaTimeoutError(f"{self.name}: no answer to {method} {url} in time ({exc!r})") from exc
        except httpx.HTTPError as exc:  # refused, reset, protocol error: the replica is unreachable
            raise ReplicaUnavailableError(f"{self.name}: {method} {url} failed: {exc!r}") from exc

    def _parse_completion(self, response: httpx.Response, adapter: str | None) -> Generation:
        try:
            payload = response.json()
            choice = payload["choices"][0]
            tokens = choice["logprobs"]["tokens"]
            token_ids = [int(t.removeprefix(TOKEN_ID_PREFIX)) for t in tokens]
            logprobs = [float(x) for x in choice["logprobs"]["token_logprobs"]]
            usage = payload.get("usage") or {}
            details = usage.get("prompt_tokens_details") or {}
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ReplicaServerError(f"{self.name}: malformed completion answer: {exc!r}") from exc
        return Generation(
            token_ids=token_ids, logprobs=logprobs, finish_reason=choice.get("finish_reason") or "length",
            adapter_version=adapter_version(adapter), replica=self.name,
            n_prompt_tokens=int(usage.get("prompt_tokens", 0)), n_cached_tokens=int(details.get("cached_tokens") or 0),
        )


def _error_message(response: httpx.Response) -> str:
    """The message of a vLLM error body (``{"error": {"message"}}`` or ``{"message"}``), else the text."""
    try:
        payload = response.json()
    except ValueError:
        return response.text[:500]
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])
        if "message" in payload:
            return str(payload["message"])
    return response.text[:500]


def _raise_for_status(name: str, response: httpx.Response) -> None:
    if response.status_code >= 500:
        raise ReplicaServerError(f"{name}: HTTP {response.status_code}: {_error_message(response)}")
    if response.status_code != 200:
        raise RequestError(f"{name}: HTTP {response.status_code}: {_error_message(response)}")

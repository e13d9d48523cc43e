"""Builds the run's policy gateway from its config, through a small registry of builders.

Every builder returns an async context manager yielding a :class:`PolicyGateway`. ``embedded``
(the default) is the TITO gateway over a router of replicas: in-process TransformersEngines
(the embedded SmolLM2 unless ``model`` names another) and/or vLLM servers, one per entry of
``engines`` built by :data:`ENGINE_BUILDERS`. ``import`` calls any ``module:callable`` (which
may return a gateway or an async context manager of one),
so that a deployment can plug its own gateway in without touching gymfleet.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any

from gymfleet.core.errors import ConfigError
from gymfleet.orchestrator.config import PolicyConfig
from gymfleet.orchestrator.engines.config import TransformersEngineConfig
from gymfleet.orchestrator.engines.vllm import VLLMEngineConfig
from gymfleet.orchestrator.protocols import Engine, PolicyGateway


def _load(factory: str) -> Callable[..., Any]:
    module, _, attr = factory.partition(":")
    if not module or not attr:
        raise ConfigError(f"policy.factory {factory!r}: write module:callable")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"policy.factory {factory!r} cannot be loaded: {exc}") from exc


@asynccontextmanager
async def _import_builder(cfg: PolicyConfig) -> AsyncIterator[PolicyGateway]:
    if not cfg.factory:
        raise ConfigError("policy.kind is import: set policy.factory to module:callable")
    made = _load(cfg.factory)(**cfg.options)
    if isinstance(made, AbstractAsyncContextManager):
        async with made as gateway:
            yield _checked(gateway, cfg.factory)
    else:
        yield _checked(made, cfg.factory)


def _checked(gateway: Any, origin: str) -> PolicyGateway:
    if not isinstance(gateway, PolicyGateway):
        raise ConfigError(f"policy.factory {origin} returned a {type(gateway).__name__}, not a PolicyGateway")
    return gateway


async def _transformers_replica(cfg: TransformersEngineConfig, stack: AsyncExitStack) -> Engine:
    from gymfleet.orchestrator.engines.transformers_engine import TransformersEngine

    # Loading weights takes seconds: off the event loop.
    return await stack.enter_async_context(await asyncio.to_thread(TransformersEngine, cfg))


async def _vllm_replica(cfg: VLLMEngineConfig, stack: AsyncExitStack) -> Engine:
    from gymfleet.orchestrator.engines.vllm import VLLMEngine

    return await stack.enter_async_context(VLLMEngine(cfg))


ENGINE_BUILDERS: dict[str, Callable[[Any, AsyncExitStack], Awaitable[Engine]]] = {
    "transformers": _transformers_replica,
    "vllm": _vllm_replica,
}
"""Per engine kind (``policy.engines[].kind``), how to start one replica of it."""


@asynccontextmanager
async def _gateway_builder(cfg: PolicyConfig, run_id: str) -> AsyncIterator[PolicyGateway]:
    """The TITO gateway over a router of the configured replicas (default: one embedded engine)."""
    from gymfleet.core.models import load_tokenizer
    from gymfleet.orchestrator.engines.errors import AdapterPublishError
    from gymfleet.orchestrator.gateway import Gateway, GatewayConfig
    from gymfleet.orchestrator.router import Router, RouterConfig

    async with AsyncExitStack() as stack:
        specs = cfg.engines or [TransformersEngineConfig(name="local-0", source=cfg.model)]
        replicas = [await ENGINE_BUILDERS[spec.kind](spec, stack) for spec in specs]
        router_cfg = cfg.router
        if router_cfg is None:
            # In-process replicas are not "hanging" when a turn is slow (a busy CPU): the task's
            # turn_timeout_s is the limit there, so the router's own per-request limit is lifted.
            in_process = all(isinstance(spec, TransformersEngineConfig) for spec in specs)
            router_cfg = RouterConfig(request_timeout_s=24 * 3600.0) if in_process else RouterConfig()
        router = await stack.enter_async_context(Router(replicas, router_cfg))
        tokenizer = getattr(replicas[0], "tokenizer", None)
        if tokenizer is None:
            tokenizer = await asyncio.to_thread(load_tokenizer, cfg.model)
        gateway = Gateway(tokenizer, router, GatewayConfig(run_id=run_id))
        if cfg.adapter:
            try:
                await gateway.publish_adapter(cfg.adapter_version, cfg.adapter)
            except AdapterPublishError as exc:
                raise ConfigError(
                    f"policy.adapter {cfg.adapter!r}: {exc}; pass a folder holding a PEFT adapter "
                    "(adapter_config.json and its weights), or leave policy.adapter unset for the base model"
                ) from exc
        yield gateway


BUILDERS: dict[str, Callable[[PolicyConfig, str], AbstractAsyncContextManager[PolicyGateway]]] = {
    "import": lambda cfg, run_id: _import_builder(cfg),
    "embedded": _gateway_builder,
}


def open_gateway(cfg: PolicyConfig, run_id: str = "run") -> AbstractAsyncContextManager[PolicyGateway]:
    """The gateway of ``cfg`` as an async context manager.

    Args:
        cfg: the policy config.
        run_id: the run; names the adapters the gateway loads.

    Raises:
        ConfigError: unknown ``kind`` (the message lists the known ones).
    """
    builder = BUILDERS.get(cfg.kind)
    if builder is None:
        raise ConfigError(f"policy.kind {cfg.kind!r} is not available here; known: {', '.join(sorted(BUILDERS))}")
    return builder(cfg, run_id)

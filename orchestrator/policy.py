"""Builds the run's policy gateway from its config, through a small registry of builders.

Every builder returns an async context manager yielding a :class:`PolicyGateway`. ``embedded``
(the default) is the TITO gateway over a router of replicas: in-process TransformersEngines
(the embedded SmolLM2 unless ``model`` names another) and/or vLLM servers. ``import`` calls any ``module:callable`` (which may return a gateway or an async context manager of one),
so that a deployment can plug its own gateway in without touching gymfleet.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any

from pydantic import ValidationError

from gymfleet.orchestrator.config import PolicyConfig
from gymfleet.orchestrator.errors import ConfigError
from gymfleet.orchestrator.protocols import PolicyGateway

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


async def _replica(index: int, spec: dict[str, Any], cfg: PolicyConfig, stack: AsyncExitStack) -> Any:
    from gymfleet.orchestrator.engines.transformers_engine import TransformersEngine, TransformersEngineConfig
    from gymfleet.orchestrator.engines.vllm import VLLMEngine, VLLMEngineConfig

    options = {k: v for k, v in spec.items() if k != "kind"}
    kind = spec.get("kind", "transformers")
    try:
        if kind == "transformers":
            options.setdefault("name", f"local-{index}")
            options.setdefault("source", cfg.model)
            engine_cfg = TransformersEngineConfig.model_validate(options)
            # Loading weights takes seconds: off the event loop.
            return await stack.enter_async_context(await asyncio.to_thread(TransformersEngine, engine_cfg))
        if kind == "vllm":
            return await stack.enter_async_context(VLLMEngine(VLLMEngineConfig.model_validate(options)))
    except ValidationError as exc:
        raise ConfigError(f"policy.engines[{index}] ({kind}): {exc}") from exc
    raise ConfigError(f"policy.engines[{index}]: kind {kind!r} unknown; use transformers or vllm")


@asynccontextmanager
async def _gateway_builder(cfg: PolicyConfig, run_id: str) -> AsyncIterator[PolicyGateway]:
    """The TITO gateway over a router of the configured replicas (default: one embedded engine)."""
    from gymfleet.orchestrator.engines.errors import AdapterPublishError
    from gymfleet.core.models import load_tokenizer
    from gymfleet.orchestrator.gateway import Gateway, GatewayConfig
    from gymfleet.orchestrator.router import Router, RouterConfig

    async with AsyncExitStack() as stack:
        specs = cfg.engines or [{"kind": "transformers"}]
        replicas = [await _replica(i, spec, cfg, stack) for i, spec in enumerate(specs)]
        # In-process replicas are not "hanging" when a turn is slow (a busy CPU): the task's
        # turn_timeout_s is the limit there, so the router's own per-request limit is lifted.
        in_process = all(spec.get("kind", "transformers") == "transformers" for spec in specs)
        router_options = {"request_timeout_s": 24 * 3600.0} if in_process else {}
        router_options |= cfg.options.get("router", {})
        router = await stack.enter_async_context(Router(replicas, RouterConfig(**router_options)))
        tokenizer = getattr(replicas[0], "tokenizer", None)
        if tokenizer is None:
            tokenizer = await asyncio.to_thread(load_tokenizer, cfg.model)
        gateway = Gateway(tokenizer, router, GatewayConfig(run_id=run_id))
        if cfg.adapter:
            try:
                await gateway.publish_adapter(int(cfg.options.get("adapter_version", 1)), cfg.adapter)
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

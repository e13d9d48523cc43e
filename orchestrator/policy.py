"""Builds the run's policy gateway from its config, through a small registry of builders.

Every builder returns an async context manager yielding a :class:`PolicyGateway`. ``embedded``
(the default) is the TITO gateway over a router of replicas: in-process TransformersEngines
(the embedded SmolLM2 unless ``model`` names another) and/or vLLM servers, running or launched
here; HTTP replicas pass the start-up parity check first. ``import`` calls any ``module:callable`` (which may return a gateway or an async context manager of one),
so that a deployment can plug its own gateway in without touching gymfleet.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gymfleet.orchestrator.config import PolicyConfig, validation_problems
from gymfleet.orchestrator.errors import ConfigError
from gymfleet.orchestrator.protocols import PolicyGateway
from gymfleet.orchestrator.records import SamplingParams

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


async def _replicas(index: int, spec: dict[str, Any], cfg: PolicyConfig, stack: AsyncExitStack,
                    max_staleness: int | None) -> list[Any]:
    from gymfleet.orchestrator.engines.errors import ReplicaLaunchError
    from gymfleet.orchestrator.engines.transformers_engine import TransformersEngine, TransformersEngineConfig
    from gymfleet.orchestrator.engines.vllm import VLLMEngineConfig

    options = {k: v for k, v in spec.items() if k != "kind"}
    kind = spec.get("kind", "transformers")
    try:
        if kind == "transformers":
            options.setdefault("name", f"local-{index}")
            options.setdefault("source", {"model": cfg.model or "embedded"})
            engine_cfg = TransformersEngineConfig.model_validate(options)
            # Loading weights takes seconds: off the event loop.
            return [await stack.enter_async_context(await asyncio.to_thread(TransformersEngine, engine_cfg))]
        if kind == "vllm":
            return await _vllm_replicas(VLLMEngineConfig.model_validate(options), cfg, stack, max_staleness)
    except ValidationError as exc:
        raise ConfigError(f"policy.engines[{index}] ({kind}): {validation_problems(exc)}") from exc
    except ReplicaLaunchError as exc:
        raise ConfigError(f"policy.engines[{index}] ({kind}): {exc}") from exc
    raise ConfigError(f"policy.engines[{index}]: kind {kind!r} unknown; use transformers or vllm")


async def _vllm_replicas(engine_cfg: Any, cfg: PolicyConfig, stack: AsyncExitStack, max_staleness: int | None) -> list[Any]:
    """One client of a running server, or ``replicas`` launched servers (stopped with the stack)."""
    from gymfleet.orchestrator.engines.model_loading import ModelSource, resolve
    from gymfleet.orchestrator.engines.vllm import VLLMEngine
    from gymfleet.orchestrator.engines.vllm_launcher import launch_servers

    if not engine_cfg.launch:
        return [await stack.enter_async_context(VLLMEngine(engine_cfg))]
    server = engine_cfg.server
    if max_staleness is not None:  # a version with rollouts in flight must keep its LoRA slot
        server = server.model_copy(update={"max_loras": max(server.max_loras, max_staleness + 2)})
    if cfg.model not in (None, "embedded") and server.served_model_name is None:
        server = server.model_copy(update={"served_model_name": Path(cfg.model).name})
    model_dir = server.model or (await asyncio.to_thread(resolve, ModelSource(model=cfg.model or "embedded")))[0]
    servers = await stack.enter_async_context(launch_servers(server, engine_cfg.replicas, model_dir))
    engines = []
    for i, launched in enumerate(servers):
        name = f"{engine_cfg.name}-{i}" if engine_cfg.name else launched.base_url
        client = engine_cfg.model_copy(update={"base_url": launched.base_url, "model": launched.served_model_name, "name": name})
        engines.append(await stack.enter_async_context(VLLMEngine(client)))
    return engines


async def _check_parity(replicas: list[Any], gateway: Any, cfg: PolicyConfig, sampling: SamplingParams) -> None:
    """The start-up parity check of the HTTP replicas (:mod:`gymfleet.orchestrator.parity`)."""
    from gymfleet.models import ModelSpec, load_causal_lm
    from gymfleet.orchestrator.engines.errors import ParityError
    from gymfleet.orchestrator.engines.model_loading import ModelSource, resolve
    from gymfleet.orchestrator.parity import PROBE_MESSAGES, LearnerScorer, check_parity

    model_dir, _ = await asyncio.to_thread(resolve, ModelSource(model=cfg.model or "embedded"))
    model = await asyncio.to_thread(load_causal_lm, ModelSpec(name_or_path=model_dir, dtype=cfg.parity.dtype))
    template = gateway.template
    prompt_ids = template.encode(template.render(PROBE_MESSAGES, add_generation_prompt=True))
    try:
        await check_parity(replicas, prompt_ids, LearnerScorer(model), sampling, cfg.parity)
    except ParityError as exc:
        raise ConfigError(f"policy.parity: {exc}") from exc


@asynccontextmanager
async def _gateway_builder(cfg: PolicyConfig, run_id: str, max_staleness: int | None = None,
                           sampling: SamplingParams | None = None) -> AsyncIterator[PolicyGateway]:
    """The TITO gateway over a router of the configured replicas (default: one embedded engine)."""
    from gymfleet.orchestrator.engines.errors import AdapterPublishError
    from gymfleet.orchestrator.engines.model_loading import ModelSource, load_tokenizer
    from gymfleet.orchestrator.gateway import Gateway, GatewayConfig
    from gymfleet.orchestrator.router import Router, RouterConfig

    async with AsyncExitStack() as stack:
        specs = cfg.engines or [{"kind": "transformers"}]
        made = [await _replicas(i, spec, cfg, stack, max_staleness) for i, spec in enumerate(specs)]
        replicas = [engine for group in made for engine in group]
        http = [engine for spec, group in zip(specs, made) if spec.get("kind") == "vllm" for engine in group]
        # In-process replicas are not "hanging" when a turn is slow (a busy CPU): the task's
        # turn_timeout_s is the limit there, so the router's own per-request limit is lifted.
        in_process = not http
        router_options = {"request_timeout_s": 24 * 3600.0} if in_process else {}
        router_options |= cfg.options.get("router", {})
        router = await stack.enter_async_context(Router(replicas, RouterConfig(**router_options)))
        tokenizer = getattr(replicas[0], "tokenizer", None)
        if tokenizer is None:
            tokenizer = await asyncio.to_thread(load_tokenizer, ModelSource(model=cfg.model or "embedded"))
        gateway = Gateway(tokenizer, router, GatewayConfig(run_id=run_id))
        if cfg.parity.enabled and http:
            await _check_parity(http, gateway, cfg, sampling or SamplingParams())
        if cfg.adapter:
            try:
                await gateway.publish_adapter(int(cfg.options.get("adapter_version", 1)), cfg.adapter)
            except AdapterPublishError as exc:
                raise ConfigError(
                    f"policy.adapter {cfg.adapter!r}: {exc}; pass a folder holding a PEFT adapter "
                    "(adapter_config.json and its weights), or leave policy.adapter unset for the base model"
                ) from exc
        yield gateway


BUILDERS: dict[str, Callable[..., AbstractAsyncContextManager[PolicyGateway]]] = {
    "import": lambda cfg, run_id, **_: _import_builder(cfg),
    "embedded": _gateway_builder,
}


def open_gateway(cfg: PolicyConfig, run_id: str = "run", *, max_staleness: int | None = None,
                 sampling: SamplingParams | None = None) -> AbstractAsyncContextManager[PolicyGateway]:
    """The gateway of ``cfg`` as an async context manager.

    Args:
        cfg: the policy config.
        run_id: the run; names the adapters the gateway loads.
        max_staleness: the run's staleness bound; launched vLLM servers get at least
            ``max_staleness + 2`` LoRA slots.
        sampling: the run's sampling (the parity probe samples with its temperature and top-p).

    Raises:
        ConfigError: unknown ``kind`` (the message lists the known ones).
    """
    builder = BUILDERS.get(cfg.kind)
    if builder is None:
        raise ConfigError(f"policy.kind {cfg.kind!r} is not available here; known: {', '.join(sorted(BUILDERS))}")
    return builder(cfg, run_id, max_staleness=max_staleness, sampling=sampling)

"""Builds the run's policy gateway from its config, through a small registry of builders.

Every builder returns an async context manager yielding a :class:`PolicyGateway`. ``embedded``
(the default) is the TITO gateway over a router of replicas: in-process TransformersEngines
(the embedded SmolLM2 unless ``model`` names another) and/or vLLM servers, running or launched
here, built by :data:`ENGINE_BUILDERS`; HTTP replicas pass the start-up parity check
(:mod:`~gymfleet.orchestrator.parity`) first. ``import`` calls any ``module:callable`` (which
may return a gateway or an async context manager of one),
so that a deployment can plug its own gateway in without touching gymfleet.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gymfleet.core.errors import ConfigError
from gymfleet.core.records import SamplingParams
from gymfleet.orchestrator.config import PolicyConfig
from gymfleet.orchestrator.engines.config import TransformersEngineConfig
from gymfleet.orchestrator.engines.limits import ReplicaLimits
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


@dataclass
class _Build:
    """What an engine builder gets besides its own config."""

    policy: PolicyConfig
    stack: AsyncExitStack
    """Closes the replicas (and stops launched servers) when the gateway closes."""
    max_staleness: int | None
    """The run's staleness bound (launched vLLM servers get ``max_staleness + 2`` LoRA slots)."""
    limits: ReplicaLimits
    """The router's per-call limits, which HTTP replica clients use as their own timeouts."""


async def _transformers_replicas(cfg: TransformersEngineConfig, build: _Build) -> list[Engine]:
    from gymfleet.orchestrator.engines.transformers_engine import TransformersEngine

    # Loading weights takes seconds: off the event loop.
    return [await build.stack.enter_async_context(await asyncio.to_thread(TransformersEngine, cfg))]


async def _vllm_replicas(cfg: VLLMEngineConfig, build: _Build) -> list[Engine]:
    """One client of a running server, or ``replicas`` servers launched here (stopped with the stack)."""
    from gymfleet.core.models import resolve_model_dir
    from gymfleet.orchestrator.engines.vllm import VLLMEngine
    from gymfleet.orchestrator.engines.vllm_launcher import launch_servers

    if not cfg.launch:
        return [await build.stack.enter_async_context(VLLMEngine(cfg, limits=build.limits))]
    server, model = cfg.server, build.policy.model
    if build.max_staleness is not None:  # a version with rollouts in flight must keep its LoRA slot
        server = server.model_copy(update={"max_loras": max(server.max_loras, build.max_staleness + 2)})
    if not model.is_embedded and server.served_model_name is None:
        server = server.model_copy(update={"served_model_name": Path(model.name_or_path).name})
    model_dir = server.model or await asyncio.to_thread(resolve_model_dir, model)
    servers = await build.stack.enter_async_context(launch_servers(server, cfg.replicas, model_dir))
    engines: list[Engine] = []
    for i, launched in enumerate(servers):
        name = f"{cfg.name}-{i}" if cfg.name else launched.base_url
        client = cfg.model_copy(update={"base_url": launched.base_url, "model": launched.served_model_name, "name": name})
        engines.append(await build.stack.enter_async_context(VLLMEngine(client, limits=build.limits)))
    return engines


ENGINE_BUILDERS: dict[str, Callable[[Any, _Build], Awaitable[list[Engine]]]] = {
    "transformers": _transformers_replicas,
    "vllm": _vllm_replicas,
}
"""Per engine kind (``policy.engines[].kind``), how to start its replicas (several when launched)."""


async def _check_parity(replicas: list[Engine], gateway: Any, cfg: PolicyConfig, sampling: SamplingParams) -> None:
    """The start-up parity check of the HTTP replicas (:mod:`gymfleet.orchestrator.parity`)."""
    from gymfleet.core.models import load_causal_lm
    from gymfleet.orchestrator.engines.errors import ParityError
    from gymfleet.orchestrator.parity import PROBE_MESSAGES, LearnerScorer, check_parity

    learner_model = cfg.model.model_copy(update={"dtype": cfg.parity.dtype})
    model = await asyncio.to_thread(load_causal_lm, learner_model)
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
    from gymfleet.core.models import load_tokenizer
    from gymfleet.orchestrator.engines.errors import AdapterPublishError, ReplicaLaunchError
    from gymfleet.orchestrator.gateway import Gateway, GatewayConfig
    from gymfleet.orchestrator.router import Router, RouterConfig

    async with AsyncExitStack() as stack:
        specs = cfg.engines or [TransformersEngineConfig(name="local-0", source=cfg.model)]
        router_cfg = cfg.router
        if router_cfg is None:
            # In-process replicas are not "hanging" when a turn is slow (a busy CPU): the task's
            # turn_timeout_s is the limit there, so the router's own per-request limit is lifted.
            http_specs = any(isinstance(spec, VLLMEngineConfig) for spec in specs)
            router_cfg = RouterConfig(request_timeout_s=24 * 3600.0) if not http_specs else RouterConfig()
        build = _Build(cfg, stack, max_staleness, router_cfg)
        made: list[list[Engine]] = []
        for i, spec in enumerate(specs):
            try:
                made.append(await ENGINE_BUILDERS[spec.kind](spec, build))
            except ReplicaLaunchError as exc:
                raise ConfigError(f"policy.engines.{i} ({spec.kind}): {exc}") from exc
        replicas = [engine for group in made for engine in group]
        http = [e for spec, group in zip(specs, made) if isinstance(spec, VLLMEngineConfig) for e in group]
        router = await stack.enter_async_context(Router(replicas, router_cfg))
        tokenizer = getattr(replicas[0], "tokenizer", None)
        if tokenizer is None:
            tokenizer = await asyncio.to_thread(load_tokenizer, cfg.model)
        gateway = Gateway(tokenizer, router, GatewayConfig(run_id=run_id))
        if cfg.parity.enabled and http:
            await _check_parity(http, gateway, cfg, sampling or SamplingParams())
        if cfg.adapter:
            try:
                await gateway.publish_adapter(cfg.adapter_version, cfg.adapter)
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

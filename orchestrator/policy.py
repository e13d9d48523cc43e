"""Builds the run's policy gateway from its config, through a small registry of builders.

Every builder returns an async context manager yielding a :class:`PolicyGateway`; ``import``
calls any ``module:callable`` (which may return a gateway or an async context manager of one),
so that a deployment can plug its own gateway in without touching gymfleet.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from gymfleet.orchestrator.config import PolicyConfig
from gymfleet.orchestrator.errors import ConfigError
from gymfleet.orchestrator.protocols import PolicyGateway

Builder = Callable[[PolicyConfig], AbstractAsyncContextManager[PolicyGateway]]


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


BUILDERS: dict[str, Builder] = {"import": _import_builder}


def open_gateway(cfg: PolicyConfig) -> AbstractAsyncContextManager[PolicyGateway]:
    """The gateway of ``cfg`` as an async context manager.

    Raises:
        ConfigError: unknown ``kind`` (the message lists the known ones).
    """
    builder = BUILDERS.get(cfg.kind)
    if builder is None:
        raise ConfigError(f"policy.kind {cfg.kind!r} is not available here; known: {', '.join(sorted(BUILDERS))}")
    return builder(cfg)

"""gymfleet.envs: the env contract, registry, shared resources, sandboxes and env families.

The names a user needs are importable from here (loaded on first use, so that importing a
submodule stays cheap): ``AgentEnv``, ``SandboxEnv``, ``EnvResources``, ``make``,
``make_agent_env``, ``check_env``.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AgentEnv": "gymfleet.envs.base",
    "SandboxEnv": "gymfleet.envs.sandbox_env",
    "EnvResources": "gymfleet.envs.resources",
    "ResourcesConfig": "gymfleet.envs.resources",
    "make": "gymfleet.envs.registry",
    "make_agent_env": "gymfleet.envs.registry",
    "check_env": "gymfleet.envs.check",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'gymfleet.envs' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)

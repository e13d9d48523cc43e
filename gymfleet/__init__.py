"""gymfleet: agent environments and an asynchronous RL orchestrator for LLM agents.

The names a user needs, loaded on first use (``import gymfleet`` stays light)::

    import gymfleet

    env = gymfleet.make("gymfleet/Terminal-v0")            # a Gymnasium env (text in, text out)
    gymfleet.check_env("mypkg/Thing-v0")                   # the env contract, as the tests run it
    outcome = asyncio.run(gymfleet.collect(gymfleet.load_run_config("configs/collect-terminal.yaml")))
    job = asyncio.run(gymfleet.train(gymfleet.load_train_config("configs/train-default.yaml")))

``AgentEnv`` is the base class of an env; ``RunConfig`` / ``TrainConfig`` the configs;
``open_run`` composes a run for a launcher of your own; ``GymfleetError`` is the root of every
error gymfleet raises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gymfleet.core.lazy import lazy_exports
from gymfleet.core.after_import import after_import

__version__ = "0.1.0"

_EXPORTS = {
    "AgentEnv": "gymfleet.envs.base",
    "make": "gymfleet.envs.registry",
    "check_env": "gymfleet.envs.check",
    "RunConfig": "gymfleet.orchestrator.config",
    "load_run_config": "gymfleet.orchestrator.config",
    "TrainConfig": "gymfleet.run.config",
    "load_train_config": "gymfleet.run.config",
    "collect": "gymfleet.run.collection",
    "train": "gymfleet.run.job",
    "open_run": "gymfleet.run.compose",
    "GymfleetError": "gymfleet.core.errors",
}

__all__ = ["__version__", *_EXPORTS]

if TYPE_CHECKING:
    from gymfleet.core.errors import GymfleetError
    from gymfleet.envs.base import AgentEnv
    from gymfleet.envs.check import check_env
    from gymfleet.envs.registry import make
    from gymfleet.orchestrator import RunConfig, load_run_config
    from gymfleet.run.collection import collect
    from gymfleet.run.compose import open_run
    from gymfleet.run.config import TrainConfig, load_train_config
    from gymfleet.run.job import train

__getattr__ = lazy_exports(__name__, _EXPORTS)

# gymnasium.make("gymfleet/Terminal-v0") works after `import gymfleet`: the envs register as soon
# as Gymnasium is imported (at once if it is already), without importing it here.
after_import("gymnasium", "gymfleet.envs.registration:register_all")

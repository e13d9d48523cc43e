"""The application layer: composes runs (:func:`open_run`) and runs them (``collect``, ``train``).

It is the only package that knows every other one: the orchestrator, the env resources and the
learner (through ``gymfleet.trainer``'s public names). Names load on first use.
"""

from __future__ import annotations

from gymfleet.core.lazy import lazy_exports

_EXPORTS = {
    "Run": ".compose", "open_run": ".compose", "runnable_tasks": ".compose",
    "collect": ".collection", "ConfigWatcher": ".collection",
    "train": ".job", "JobOutcome": ".job",
    "TrainConfig": ".config", "BudgetConfig": ".config", "load_train_config": ".config",
    "train_config_from_dict": ".config",
    "evaluate": ".evaluate", "EvalResult": ".evaluate",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)

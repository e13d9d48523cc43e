"""Third-party noise off: progress bars and warnings of the model stacks where nothing happens.

:func:`quiet_third_party` is called once, at command-line start-up, unless ``--verbose``;
it marks the environment (``GYMFLEET_QUIET=1``) so that a spawned child (the learner process)
quiets itself too with :func:`quiet_if_asked`. It imports nothing heavy: it sets the
environment variables the libraries read when they load, and warnings filters that match by
module name.
"""

from __future__ import annotations

import os
import sys
import warnings

_ENV = {
    "TRANSFORMERS_VERBOSITY": "error",  # read when transformers is imported
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' "Loading weights" bars follow huggingface_hub's
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "TOKENIZERS_PARALLELISM": "false",  # the fork warning of tokenizers
    "TQDM_DISABLE": "1",  # bars transformers draws with tqdm itself (GGUF de-quantisation)
}
QUIET_ENV = "GYMFLEET_QUIET"
_QUIET_MODULES = r"(transformers|peft|huggingface_hub|accelerate|torch)(\..*)?$"


def quiet_third_party() -> None:
    """Turns third-party progress bars and advisory warnings off, for this process and the
    processes it starts (learner, workers inherit the environment). A variable the user set
    keeps its value; errors are still printed."""
    os.environ[QUIET_ENV] = "1"
    for name, value in _ENV.items():
        os.environ.setdefault(name, value)
    for category in (FutureWarning, DeprecationWarning, UserWarning):
        warnings.filterwarnings("ignore", category=category, module=_QUIET_MODULES)
    if "transformers" in sys.modules:  # a command module imported it before start-up ran
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()


def quiet_if_asked() -> None:
    """:func:`quiet_third_party` in a child process whose parent was quiet (``GYMFLEET_QUIET=1``)."""
    if os.environ.get(QUIET_ENV) == "1":
        quiet_third_party()


def one_line_deprecations() -> None:
    """Prints gymfleet's own deprecations (a ``FutureWarning`` subclass defined in gymfleet, e.g.
    :class:`~gymfleet.orchestrator.run_settings.ConfigDeprecationWarning`) as one line, ``deprecated: <message>``, instead of Python's two (file, line and source). Other
    warnings keep Python's format. Calling it again changes nothing."""
    current = warnings.formatwarning
    if getattr(current, "_gymfleet_one_line", False):
        return

    def formatwarning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                      line: str | None = None) -> str:
        if issubclass(category, FutureWarning) and category.__module__.startswith("gymfleet."):
            return f"deprecated: {message}\n"
        return current(message, category, filename, lineno, line)

    formatwarning._gymfleet_one_line = True  # type: ignore[attr-defined]
    warnings.formatwarning = formatwarning

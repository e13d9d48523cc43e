"""The command line's front door: ``gymfleet --help`` imports none of the heavy stacks (each
command's module loads only when that command runs), every listed command still loads and
shows its own help, the top-level text is for users, flags show no ``<bool>``, and third-party
noise (progress bars, advisory warnings) is off unless ``--verbose``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gymfleet.cli.main import COMMANDS, app
from gymfleet.core.quiet import quiet_third_party

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "peft", "sqlalchemy", "docker", "playwright")

_HELP_THEN_MODULES = """
import json, sys
sys.argv = ["gymfleet", *json.loads(sys.argv[1])]
from gymfleet.cli import app
try:
    app()
except SystemExit:
    pass
print("MODULES=" + json.dumps(sorted(sys.modules)))
"""


def help_modules(*args: str) -> tuple[str, set[str]]:
    """Runs the real entry point with ``args`` in a fresh interpreter: (its output, the top-level
    packages imported by the time it ended)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-c", _HELP_THEN_MODULES, json.dumps(list(args))],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr
    text, _, modules = done.stdout.rpartition("MODULES=")
    return text, {m.split(".")[0] for m in json.loads(modules)}


def test_top_level_help_imports_no_heavy_stack() -> None:
    text, loaded = help_modules("--help")
    assert "Start with:" in text and "gymfleet train" in text
    for name in COMMANDS:
        assert name in text
    assert sorted(loaded & set(HEAVY)) == []


def test_a_command_group_help_loads_only_that_group() -> None:
    text, loaded = help_modules("runs", "--help")
    assert "export" in text and "show" in text
    assert "torch" not in loaded and "playwright" not in loaded


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_listed_command_loads_and_shows_its_help(name: str) -> None:
    result = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert f"gymfleet {name}" in result.output.replace("Usage: root", "Usage: gymfleet")
    assert "<bool>" not in result.output  # a flag takes no value
    assert "--install-completion" not in result.output  # shell completion is not offered anywhere


def test_unknown_command_is_one_line_exit_2() -> None:
    result = CliRunner().invoke(app, ["trian"])
    assert result.exit_code == 2
    assert "No such command" in result.output


def test_quiet_sets_library_switches_and_filters_their_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    environ = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    monkeypatch.setattr(os, "environ", {**environ, "TRANSFORMERS_VERBOSITY": "info"})  # the user's choice is kept
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_third_party()
        warnings.warn_explicit("old API", FutureWarning, "modeling_utils.py", 1, module="transformers.modeling_utils")
        warnings.warn_explicit("adapter", UserWarning, "other.py", 1, module="peft.peft_model")
        warnings.warn_explicit("ours", FutureWarning, "x.py", 1, module="gymfleet.run.job")
    assert [str(w.message) for w in caught] == ["ours"]
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    assert os.environ["TRANSFORMERS_VERBOSITY"] == "info"


def test_quiet_turns_off_an_already_imported_transformers() -> None:
    code = ("import transformers.utils.logging as l; from gymfleet.core.quiet import quiet_third_party; "
            "quiet_third_party(); print(l.is_progress_bar_enabled(), l.get_verbosity() == l.ERROR)")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_DISABLE_PROGRESS_BARS", "TRANSFORMERS_VERBOSITY")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**env, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert done.stdout.split() == ["False", "True"], done.stderr


def test_a_spawned_child_of_a_quiet_parent_is_quiet_too() -> None:
    code = ("import os, warnings; from gymfleet.core.quiet import quiet_if_asked; quiet_if_asked(); "
            "print(os.environ.get('HF_HUB_DISABLE_PROGRESS_BARS'), "
            "any(f[0] == 'ignore' and f[2] is UserWarning for f in warnings.filters))")
    for parent, expected in (("1", ["1", "True"]), ("", ["None", "False"])):
        env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_DISABLE_PROGRESS_BARS", "GYMFLEET_QUIET")}
        env = {**env, "PYTHONPATH": str(ROOT), "GYMFLEET_QUIET": parent}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
        assert done.stdout.split() == expected, done.stderr

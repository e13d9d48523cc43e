"""``after_import``: the target runs once the module has executed (not before, not at all if it is
never imported), at once when it is already imported, and a failing target never breaks the import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TARGET = """
import sys
calls = []

def hit():
    calls.append(sys.modules["wave"].Wave_read.__name__)  # the module has fully executed

def boom():
    raise RuntimeError("no")
"""


@pytest.fixture
def target_dir(tmp_path: Path) -> Path:
    (tmp_path / "hooked_target.py").write_text(TARGET)
    return tmp_path


def _run(target_dir: Path, code: str) -> subprocess.CompletedProcess[str]:
    prelude = f"import sys; sys.path.insert(0, {str(target_dir)!r})\nfrom gymfleet.core.after_import import after_import\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=120)


def test_runs_after_the_module_executes_and_only_then(target_dir: Path) -> None:
    ran = _run(target_dir, (
        "after_import('wave', 'hooked_target:hit'); after_import('wave', 'hooked_target:hit')\n"
        "assert 'wave' not in sys.modules and 'hooked_target' not in sys.modules\n"
        "import wave, hooked_target\n"
        "assert type(wave.__loader__).__name__ == 'SourceFileLoader', wave.__loader__\n"
        "assert not any(getattr(f, 'module_name', None) == 'wave' for f in sys.meta_path)\n"
        "print(hooked_target.calls)\n"
    ))
    assert ran.returncode == 0 and ran.stdout.strip() == "['Wave_read']", ran.stderr


def test_runs_at_once_when_already_imported(target_dir: Path) -> None:
    ran = _run(target_dir, "import wave\nafter_import('wave', 'hooked_target:hit')\n"
                           "print(sys.modules['hooked_target'].calls)\n")
    assert ran.returncode == 0 and ran.stdout.strip() == "['Wave_read']", ran.stderr


def test_a_failing_target_is_logged_and_the_import_stands(target_dir: Path) -> None:
    ran = _run(target_dir, "after_import('wave', 'hooked_target:boom')\nimport wave\nprint(wave.Wave_read.__name__)\n")
    assert ran.returncode == 0 and ran.stdout.strip() == "Wave_read", ran.stderr
    assert "hooked_target:boom failed after import: no" in ran.stderr

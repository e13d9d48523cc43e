"""The sandbox scripts: which files are tests, what eval.sh runs, how patches are applied."""

from __future__ import annotations

from gymfleet.envs.swe import patch as scripts
from gymfleet.envs.swe.instances import load_instances
from gymfleet.envs.swe.specs import load_spec


def test_test_files_are_excluded_from_an_agents_diff() -> None:
    declared = {"src/pkg/checks.py"}
    for path in ("tests/test_x.py", "pkg/tests/data.json", "test_y.py", "y_test.py",
                 "conftest.py", "src/pkg/checks.py"):
        assert scripts.is_test_file(path, declared), path
    for path in ("src/pkg/version.py", "src/testing_utils.py", "docs/tests.rst"):
        assert not scripts.is_test_file(path, declared), path


def test_eval_script_runs_the_test_patch_between_markers_and_records_the_exit_code() -> None:
    inst = load_instances("fixtures")[0]
    script = scripts.eval_script(inst, load_spec(inst.repo, inst.version))
    start = script.index(">>>>> Start Test Output")
    assert script.index("git apply -v -") < start
    assert script.index("pytest --no-header -rA") > start
    assert script.index("echo '>>>>> Test Exit Code: '$gymfleet_rc") > script.index(
        ">>>>> End Test Output")
    assert inst.test_patch in script
    assert "conda" not in script
    assert "conda activate testbed" in scripts.eval_script(inst, load_spec(inst.repo, inst.version),
                                                           conda=True)


def test_apply_script_tries_swebenchs_commands_in_order() -> None:
    script = scripts.apply_script()
    positions = [script.index(cmd) for cmd in scripts.APPLY_COMMANDS]
    assert positions == sorted(positions)
    assert script.rstrip().endswith("exit 1")


def test_setup_script_hides_the_future() -> None:
    script = scripts.setup_script("abc123")
    assert "checkout -q -f abc123" in script and "gc -q --prune=now" in script
    assert "gc" not in scripts.setup_script("abc123", hide_future=False)

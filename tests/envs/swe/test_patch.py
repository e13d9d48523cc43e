"""The sandbox scripts: which files are tests, what eval.sh runs, how patches are applied."""

from __future__ import annotations

from gymfleet.envs.swe import patch as scripts
from gymfleet.envs.swe import upstream
from gymfleet.envs.swe.instances import SWEInstance, load_instances
from gymfleet.envs.swe.specs import load_spec


def test_test_files_are_excluded_from_an_agents_diff() -> None:
    declared = {"src/pkg/checks.py"}
    for path in ("tests/test_x.py", "pkg/tests/data.json", "test_y.py", "y_test.py",
                 "conftest.py", "src/pkg/checks.py"):
        assert scripts.is_test_file(path, declared), path
    for path in ("src/pkg/version.py", "src/testing_utils.py", "docs/tests.rst"):
        assert not scripts.is_test_file(path, declared), path


def test_eval_script_is_swebenchs_for_every_spec_of_swe_bench_lite(lite_rows) -> None:  # type: ignore[no-untyped-def]
    make = upstream.module("harness.test_spec.python").make_eval_script_list_py
    seen = set()
    for row in lite_rows:
        if (row["repo"], row["version"]) in seen:
            continue
        seen.add((row["repo"], row["version"]))
        inst = SWEInstance.model_validate(row)
        spec = load_spec(inst.repo, inst.version)
        specs = upstream.repo_specs(inst.repo)[inst.version]
        official = make(row, specs, "testbed", "/testbed", inst.base_commit, inst.test_patch)
        assert scripts.eval_script_lines(inst, spec, conda=True) == official, inst.instance_id
        plain = scripts.eval_script_lines(inst, spec)
        assert plain == [x for x in official if "conda" not in x], inst.instance_id
    assert len(seen) > 60


def test_eval_script_runs_in_two_commands_the_test_command_last() -> None:
    inst = load_instances("fixtures")[0]
    spec = load_spec(inst.repo, inst.version)
    setup = scripts.eval_setup_script(inst, spec)
    assert "Start Test Output" not in setup and inst.test_patch in setup
    assert setup.rstrip().endswith("EOF_114329324912")  # the test patch's apply is its last command
    assert setup.index(spec.install) < setup.index("git apply -v -")
    run = scripts.test_run_script(inst, spec)
    assert run.rstrip().splitlines()[-1] == spec.test_command(inst.row()) + " 2>&1"
    assert "conda activate testbed" in scripts.test_run_script(inst, spec, conda=True)


def test_apply_script_tries_swebenchs_commands_in_order() -> None:
    script = scripts.apply_script()
    positions = [script.index(cmd) for cmd in scripts.APPLY_COMMANDS]
    assert positions == sorted(positions)
    assert script.rstrip().endswith("exit 1")


def test_agent_diff_is_taken_against_the_recorded_start_commit() -> None:
    assert "cat /opt/gymfleet/start_commit" in scripts.changed_files_command("abc123")
    assert "|| echo abc123" in scripts.diff_command("abc123", ["a.py"])

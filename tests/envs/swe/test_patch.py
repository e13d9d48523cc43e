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
        official = with_upstream_reset_fix(
            make(row, specs, "testbed", "/testbed", inst.base_commit, inst.test_patch), inst)
        assert scripts.eval_script_lines(inst, spec, conda=True) == official, inst.instance_id
        plain = scripts.eval_script_lines(inst, spec)
        assert plain == [x for x in official if "conda" not in x], inst.instance_id
    assert len(seen) > 60


def with_upstream_reset_fix(lines: list[str], inst: SWEInstance) -> list[str]:
    """4.1.0's eval script with SWE-bench #539's reset: modified test files checked out, new
    ones removed, never a bare ``git checkout <base>``."""
    modified = upstream.modified_files(inst.test_patch)
    reset_41 = f"git checkout {inst.base_commit} {' '.join(modified)}"
    fixed = ([f"git checkout {inst.base_commit} {' '.join(modified)}"] if modified else []) + (
        [f"rm -f {' '.join(upstream.new_files(inst.test_patch))}"]
        if upstream.new_files(inst.test_patch) else [])
    return [x for line in lines for x in (fixed if line == reset_41 else [line])]


def test_a_test_patch_that_only_adds_files_never_resets_the_whole_tree(lite_rows) -> None:  # type: ignore[no-untyped-def]
    row = next(r for r in lite_rows if r["instance_id"] == "sphinx-doc__sphinx-8595")
    inst = SWEInstance.model_validate(row)
    lines = scripts.eval_script_lines(inst, load_spec(inst.repo, inst.version))
    assert f"git checkout {inst.base_commit}" not in [x.strip() for x in lines]
    assert lines.count("rm -f tests/roots/test-ext-autodoc/target/empty_all.py "
                       "tests/test_ext_autodoc_automodule.py") == 2
    assert not any(x.startswith(f"git checkout {inst.base_commit}") for x in lines)


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
    assert script.startswith("exec 2>&1\n")  # stdout and stderr interleaved in one log


def test_agent_diff_is_taken_against_the_recorded_start_commit() -> None:
    assert "cat /opt/gymfleet/start_commit" in scripts.changed_files_command("abc123")
    assert "|| echo abc123" in scripts.diff_command("abc123", ["a.py"])


def test_a_failed_post_patch_install_stops_the_setup_loudly(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    inst = load_instances("fixtures")[0]
    spec = load_spec(inst.repo, inst.version).model_copy(update={"install": "false"})
    script = scripts.eval_setup_script(inst, spec)
    assert f"false || {{ echo '{scripts.INSTALL_FAILED}'; exit 97; }}" in script
    body = script.split("\nfalse || ", 1)[1]
    run = subprocess.run(["bash", "-c", "false || " + body], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert run.returncode == scripts.INSTALL_FAILED_EXIT and scripts.INSTALL_FAILED in run.stdout


def test_instance_images_stage_the_build_requirements_for_an_offline_install() -> None:
    from gymfleet.envs.swe.image_scripts import WHEELHOUSE, setup_instance_script

    inst = load_instances("fixtures")[0]
    script = setup_instance_script(load_spec(inst.repo, inst.version), inst.base_commit)
    assert f"pip download -q --dest {WHEELHOUSE}" in script
    assert script.index("step: install") < script.index("step: wheelhouse") < script.index("step: commit")


def test_the_build_requirements_are_read_from_pyproject(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    from pathlib import Path

    from gymfleet.envs.swe.image_scripts import _BUILD_REQUIRES

    out = Path("/tmp/gymfleet-build-requires.txt")  # where the image build's snippet writes

    def read() -> list[str]:
        subprocess.run(["bash", "-c", _BUILD_REQUIRES], cwd=tmp_path, check=True, timeout=120)
        found = out.read_text().split()
        out.unlink()
        return found

    assert read() == ["setuptools>=40.8.0", "wheel"]
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling", "hatch-vcs>=0.3"]\n')
    assert read() == ["hatchling", "hatch-vcs>=0.3"]


def test_an_apply_failure_names_the_failing_line_first() -> None:
    # CodeR's sphinx-8721 prediction (Lite sweep): git apply echoes tox.ini's text after "while searching
    # for:", so the log's last 800 characters began mid-file and the CLI printed "ADME.rst doc/"
    echoed = "\n".join(f"    python utils/doclinter.py CHANGES README.rst doc/ {i}" for i in range(40))
    log = (f"Checking patch tox.ini...\nerror: while searching for:\n{echoed}\nerror: patch failed: tox.ini:4\n"
           "patching file setup.py\nReversed (or previously applied) patch detected!  Assuming -R.\n"
           "patching file tox.ini\nHunk #1 FAILED at 4.\n"
           "1 out of 1 hunk FAILED -- saving rejects to file tox.ini.rej\n>>>>> Patch Apply Failed\n")
    first, tail = scripts.apply_failure(log).split("\n", 1)
    assert first == "1 out of 1 hunk FAILED -- saving rejects to file tox.ini.rej"
    assert tail.endswith(">>>>> Patch Apply Failed") and len(tail) == 800
    assert scripts.apply_failure("fatal: unrecognized input\n") == "fatal: unrecognized input\nfatal: unrecognized input"
    assert scripts.apply_failure("").startswith("no output")

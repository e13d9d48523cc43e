"""Spec lookup (--spec-table, swebench's table, gymfleet's), the Python an instance gets, the
conda translation, and what the image builder refuses before any clone."""

from __future__ import annotations

from pathlib import Path

import docker.errors
import pytest

from gymfleet.envs.swe.environment import plan_environment, requirements_text
from gymfleet.envs.swe.errors import CondaOnlySpecError, SpecNotFoundError, UnsupportedPythonError
from gymfleet.envs.swe.image_scripts import setup_env_script, setup_instance_script
from gymfleet.envs.swe.images import ImageProvider, SWEImagesConfig, official_image
from gymfleet.envs.swe.instances import load_instances
from gymfleet.envs.swe.pythons import choose_python
from gymfleet.envs.swe.repos import RepoSource
from gymfleet.envs.swe.specs import RepoSpec, load_spec


def test_swebench_table_is_used_for_its_repos() -> None:
    spec = load_spec("psf/requests", "2.4")
    assert spec.source == "swebench"
    assert spec.python == "3.9" and spec.test_cmd.startswith("pytest")
    assert callable(spec.parser())


def test_spec_table_overrides_swebench_for_the_same_repo_and_version(tmp_path: Path) -> None:
    table = tmp_path / "mine.yaml"
    table.write_text("psf/requests:\n  '2.4':\n    python: '3.11'\n    test_cmd: pytest -rA -x\n")
    spec = load_spec("psf/requests", "2.4", [table])
    assert spec.source == str(table) and spec.python == "3.11" and spec.test_cmd == "pytest -rA -x"
    assert spec.install == load_spec("psf/requests", "2.4").install  # other fields: swebench's
    assert load_spec("psf/requests", "2.3", [table]).source == "swebench"  # other versions stay


def test_fixture_specs_come_from_gymfleets_table() -> None:
    for inst in load_instances("fixtures"):
        spec = load_spec(inst.repo, inst.version)
        assert spec.source.endswith("specs.yaml")
        assert spec.python == "3.11"
        assert spec.parser().__name__ == "parse_log_pytest"
        assert spec.test_command(inst.row()).endswith(".py")


def test_extra_table_and_unknown_specs(tmp_path: Path) -> None:
    table = tmp_path / "t.yaml"
    table.write_text("me/repo:\n  '1.0':\n    test_cmd: [setup, pytest -rA]\n")
    spec = load_spec("me/repo", "1.0", [table])
    assert spec.test_cmd == "pytest -rA"
    with pytest.raises(SpecNotFoundError, match="known versions: 1.0"):
        load_spec("me/repo", "9.9", [table])
    with pytest.raises(SpecNotFoundError, match="--spec-table"):
        load_spec("nobody/nothing", "1")
    with pytest.raises(SpecNotFoundError, match="log_parser"):
        spec.parser()


class _NoImages:
    """The two calls ImageProvider makes before deciding it would have to build."""

    class images:  # noqa: N801 - mirrors docker.DockerClient.images
        @staticmethod
        def get(tag: str) -> None:
            raise docker.errors.ImageNotFound(tag)


def test_a_python_no_source_carries_fails_before_any_clone_and_names_the_options() -> None:
    row = load_instances("fixtures")[0].model_copy(
        update={"instance_id": "django__django-11099", "repo": "django/django", "version": "3.0"})
    spec = load_spec("django/django", "3.0")
    assert spec.python == "3.6"
    # no mirror, no clone, no Docker: the refusal comes first
    provider = ImageProvider(RepoSource((), allow_clone=False), client=_NoImages())  # type: ignore[arg-type]
    with pytest.raises(UnsupportedPythonError, match=r"Python 3\.6.*--python-fallback nearest"):
        provider.ensure(row, spec)


def test_python_fallback_nearest_takes_the_nearest_newer_version() -> None:
    assert choose_python("3.9").image == "swe-py39" and choose_python("3.9").fallback is None
    assert choose_python("3.11").image == "swe"
    assert choose_python("3.8", "nearest").fallback == "3.8->3.9"
    assert choose_python("3.6", "nearest").version == "3.9"
    assert choose_python("3.10", "nearest").fallback == "3.10->3.11"
    with pytest.raises(UnsupportedPythonError, match="no newer version"):
        choose_python("3.14", "nearest")
    provider = ImageProvider(RepoSource((), allow_clone=False),
                             SWEImagesConfig(python_fallback="nearest"), client=_NoImages())  # type: ignore[arg-type]
    row = load_instances("fixtures")[0]
    assert provider.check(row, RepoSpec(repo=row.repo, version="x", source="t", python="3.8")).fallback == "3.8->3.9"


def test_conda_package_lists_translate_to_pip_and_conda_only_ones_are_refused() -> None:
    spec = load_spec("scikit-learn/scikit-learn", "1.3")
    plan = plan_environment(spec, None)
    assert "numpy==1.19.2" in plan.requirements and "cython==3.0.10" in plan.requirements
    assert plan.translated and plan.translated[0].startswith("conda packages -> pip")
    fuzzy = RepoSpec(repo="a/b", version="1", source="t", packages="numpy=1.19 pytest")
    assert plan_environment(fuzzy, None).requirements == ["numpy==1.19.*", "pytest"]
    gtk = RepoSpec(repo="a/b", version="1", source="t", packages="numpy gtk4 pytest")
    with pytest.raises(CondaOnlySpecError, match="gtk4 has no pip counterpart"):
        plan_environment(gtk, None)


def test_environment_yml_translates_its_conda_and_pip_sections() -> None:
    yml = ("name: testbed\ndependencies:\n  - python=3.10\n  - numpy>=1.21\n  - pip\n"
           "  - hdf5\n  - setuptools_scm\n  - pip:\n    - mpl-sphinx-theme\n")
    spec = RepoSpec(repo="pydata/xarray", version="0.12", source="t", packages="environment.yml")
    files = {"ci/requirements/environment.yml": yml}
    plan = plan_environment(spec, files.get)
    assert plan.requirements == ["numpy>=1.21", "setuptools-scm", "mpl-sphinx-theme"]
    assert plan.translated[-1] == "dropped (their wheels bundle them): hdf5"
    files["ci/requirements/environment.yml"] = yml + "  - gtk4\n  - pygobject\n"
    with pytest.raises(CondaOnlySpecError, match="gtk4, pygobject"):
        plan_environment(spec, files.get)


def test_requirements_file_is_read_as_swebench_reads_it() -> None:
    files = {"requirements/dev.txt": "-r tests.txt\n-e .\n# c\nblack\n",
             "requirements/tests.txt": "pytest\n.[test]\n"}
    text = requirements_text("pallets/flask", files.get)
    assert text.split("\n") == ["pytest", "", "black", ""]


def test_official_image_name() -> None:
    assert (official_image("psf__requests-2317")
            == "swebench/sweb.eval.x86_64.psf_1776_requests-2317:latest")


def test_setup_scripts_install_the_spec_in_swebenchs_order() -> None:
    inst = load_instances("fixtures")[0]
    spec = load_spec(inst.repo, inst.version)
    env = setup_env_script(spec, plan_environment(spec, None))
    assert "python -m pip install pytest==9.2.0 pytest-cov" in env
    instance = setup_instance_script(spec, inst.base_commit)
    order = [instance.index(s) for s in (f"checkout -q -f {inst.base_commit}", "git gc",
                                         spec.pre_install[0], spec.install, "commit -q --allow-empty -am SWE-bench")]
    assert order == sorted(order)
    assert instance.rstrip().endswith("> /opt/gymfleet/start_commit")

"""Spec lookup (swebench's table, then gymfleet's) and what the image builder refuses."""

from __future__ import annotations

from pathlib import Path

import docker.errors
import pytest

from gymfleet.envs.swe.errors import SpecNotFoundError, UnsupportedPythonError
from gymfleet.envs.swe.images import ImageProvider, official_image, setup_env_script
from gymfleet.envs.swe.instances import load_instances
from gymfleet.envs.swe.repos import RepoSource
from gymfleet.envs.swe.specs import load_spec


def test_swebench_table_comes_first() -> None:
    spec = load_spec("psf/requests", "2.4")
    assert spec.source == "swebench"
    assert spec.python == "3.9" and spec.test_cmd.startswith("pytest")
    assert spec.parser().__name__ == "parse_log_requests" or callable(spec.parser())


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


def test_a_python_the_image_lacks_is_an_unsupported_python_error() -> None:
    row = load_instances("fixtures")[0].model_copy(
        update={"instance_id": "psf__requests-2317", "repo": "psf/requests", "version": "2.4"})
    provider = ImageProvider(RepoSource((), allow_clone=False), client=_NoImages())  # type: ignore[arg-type]
    with pytest.raises(UnsupportedPythonError, match="needs Python 3.9.*official SWE-bench image"):
        provider.ensure(row, load_spec("psf/requests", "2.4"))


def test_official_image_name() -> None:
    assert (official_image("psf__requests-2317")
            == "swebench/sweb.eval.x86_64.psf_1776_requests-2317:latest")


def test_setup_script_installs_the_spec(tmp_path: Path) -> None:
    inst = load_instances("fixtures")[0]
    script = setup_env_script(load_spec(inst.repo, inst.version), inst, tmp_path)
    assert "python -m pip install 'pytest==9.2.0'" in script
    assert "pip install --no-build-isolation -e ." in script
    assert script.rstrip().endswith(">> .git/info/exclude")

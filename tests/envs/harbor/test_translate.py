"""Harbor task folders load, and their Dockerfiles translate to buildable-offline ones (no Docker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymfleet.envs.errors import TaskError
from gymfleet.envs.harbor.build import HarborImageBuilder
from gymfleet.envs.harbor.dockerfile import UnbuildableError, logical_lines, nearest_python_suite, substitute, translate
from gymfleet.envs.harbor.staging import verifier_staging
from gymfleet.envs.harbor.env import EXAMPLES_DIR
from gymfleet.envs.harbor.grader import parse_reward_json, parse_reward_text
from gymfleet.envs.harbor.task import load_task, load_tasks

TASKS = Path(__file__).resolve().parent / "tasks"
UVX_TEST_SH = """\
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
"""


def test_both_layouts_load() -> None:
    tasks = load_tasks(EXAMPLES_DIR)
    harbor, tb1 = tasks["harbor-hello"], tasks["tb1-hello"]
    assert (harbor.layout, harbor.agent_timeout_s, harbor.verifier_timeout_s) == ("harbor", 120.0, 120.0)
    assert harbor.verifier_env == {"EXPECTED_COUNT": "3"} and harbor.memory_mb == 1024 and harbor.storage_mb == 512
    assert harbor.instruction.startswith("Write `/app/out.json`")
    assert (tb1.layout, tb1.verifier_timeout_s, tb1.refusal) == ("tb1", 180.0, None)
    assert tb1.solution_script is not None and tb1.test_script.name == "run-tests.sh"


def test_glob_and_task_ids_select() -> None:
    assert list(load_tasks(f"{EXAMPLES_DIR}/harbor-*")) == ["harbor-hello"]
    assert list(load_tasks(EXAMPLES_DIR, ["tb1-hello"])) == ["tb1-hello"]
    with pytest.raises(TaskError, match="no task 'nope'"):
        load_tasks(EXAMPLES_DIR, ["nope"])


def test_compose_tasks_are_refused_in_one_line() -> None:
    task = load_task(TASKS / "compose-task")
    assert task.refusal is not None and "docker-compose" in task.refusal and "\n" not in task.refusal
    with pytest.raises(UnbuildableError, match="docker-compose"):
        HarborImageBuilder().plan(task)


@pytest.mark.parametrize(("image", "base", "python"), [
    ("ubuntu:24.04", "base-trixie", False), ("ubuntu:22.04", "base", False), ("debian:bullseye-slim", "base-bullseye", False),
    ("python:3.9-slim", "base-bullseye", True), ("python:3.12", "base-trixie", True), ("python:3.11-slim-bookworm", "base", True),
    ("ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624", "base-trixie", False),
    ("ghcr.io/laude-institute/t-bench/python-3-13:20250620", "base-trixie", True),
])
def test_public_bases_are_substituted_by_the_nearest_release(image: str, base: str, python: bool) -> None:
    found = substitute(image)
    assert found is not None and (found.image, found.python) == (base, python)


@pytest.mark.parametrize(("image", "components"), [
    ("ubuntu:24.04", True), ("ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624", True),
    ("buildpack-deps:jammy", True), ("debian:bookworm", False), ("buildpack-deps:bookworm", False),
    ("python:3.12", False),
])
def test_an_ubuntu_stand_in_enables_debian_s_contrib_and_non_free(image: str, components: bool) -> None:
    # Ubuntu images have universe and multiverse (nvidia-cuda-toolkit, unrar...); Debian's images
    # have main only, so an Ubuntu task's apt-get install of a multiverse package failed with 100
    result = translate(f"FROM {image}\nRUN apt-get install -y nvidia-cuda-toolkit\n", {})
    enabled = "sed -i 's/ main$/ main contrib non-free/' /etc/apt/sources.list && apt-get update" in result.dockerfile
    assert enabled == components


def test_nearest_python() -> None:
    assert [nearest_python_suite(v) for v in ("3.8", "3.10", "3.12", "3.14")] == ["bullseye", "bookworm", "trixie", "trixie"]


def test_translation_keeps_instructions_and_records_the_substitution() -> None:
    text = "ARG V=3.12\nFROM python:${V} AS build\nRUN echo a \\\n  b\nFROM build\nUSER app\nWORKDIR /w\n"
    result = translate(text, {"base-trixie": "gymfleet/base-trixie:abc"})
    assert result.dockerfile.startswith("ARG V=3.12\nFROM gymfleet/base-trixie:abc AS build\n")
    assert "RUN echo a   b" in result.dockerfile and "FROM build\n" in result.dockerfile
    assert result.substitutions[0].startswith("python:3.12 -> gymfleet/base-trixie") and result.final_user == "app"
    assert logical_lines("# c\nRUN a \\\n# inner\n b\n") == ["RUN a  b"]


def test_an_unpullable_from_is_unbuildable_in_one_line() -> None:
    with pytest.raises(UnbuildableError) as caught:
        translate("FROM nvcr.io/nvidia/pytorch:24.01-py3\n", {})
    assert str(caught.value) == "unbuildable: FROM nvcr.io/nvidia/pytorch:24.01-py3 cannot be pulled here and has no Debian substitute"


def test_verifier_fetches_are_found() -> None:
    staging = verifier_staging(UVX_TEST_SH)
    assert staging.uv_version == "0.9.5" and staging.apt_packages == ["curl", "python3"]
    assert staging.replay == ["uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest --version"]
    tb1 = verifier_staging((EXAMPLES_DIR / "tb1-hello/run-tests.sh").read_text())
    assert (tb1.uv_version, tb1.replay) == ("0.7.13", ["uv init", "uv add pytest==8.4.1"])


def test_rewards_parse_as_harbor_reads_them() -> None:
    assert parse_reward_text(b"0.5\n") == (0.5, None)
    assert parse_reward_text(b"")[1] is not None and parse_reward_text(b"nan")[1] is not None
    assert parse_reward_json(b'{"reward": 1, "tests": 3}') == (1.0, {"tests": 3}, None)
    assert parse_reward_json(b'{"score": 1}')[2] == "reward.json has no 'reward' key (keys: score)"
    assert parse_reward_json(b'{"reward": "1"}')[2] is not None and parse_reward_json(b"[1]")[2] is not None


def _harbor_task(folder: Path, toml: str, instruction: bytes = b"Do it.\n") -> Path:
    (folder / "tests").mkdir(parents=True)
    (folder / "instruction.md").write_bytes(instruction)
    (folder / "tests/test.sh").write_text("true")
    (folder / "task.toml").write_text(toml)
    return folder


def test_official_tb2_environment_keys_load_as_harbor_reads_them(tmp_path: Path) -> None:
    # TB2's task.toml files give memory and storage with units, and gpu_types beside gpus = 0
    toml = '[environment]\nmemory = "2G"\nstorage = "10G"\ncpus = 1\ngpus = 0\ngpu_types = ["H100", "A100"]\n'
    task = load_task(_harbor_task(tmp_path / "tb2", toml))
    assert (task.memory_mb, task.storage_mb, task.refusal) == (2048, 10240, None)
    half = load_task(_harbor_task(tmp_path / "half", '[environment]\nmemory = "512M"\nstorage_mb = 700\n'))
    assert (half.memory_mb, half.storage_mb) == (512, 700)
    gpu = load_task(_harbor_task(tmp_path / "gpu", '[environment]\ngpus = 1\ngpu_types = ["H100"]\n'))
    assert gpu.refusal == "not supported here: environment.gpus = 1 (sandboxes here have no GPU)"
    with pytest.raises(TaskError, match="environment.memory") as caught:
        load_task(_harbor_task(tmp_path / "bad", '[environment]\nmemory = "lots"\n'))
    assert "\n" not in str(caught.value)


def test_verifier_fetches_split_over_continuation_lines_are_found() -> None:
    # TB2's test.sh files split the uvx line with backslashes; read line by line nothing was
    # staged and uvx failed offline at grading ("No interpreter found for Python 3.13")
    script = ("#!/bin/bash\ncurl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh\n"
              "# a comment ending in a backslash is no continuation \\\n"
              "uvx \\\n  -p 3.13 \\\n  -w pytest==8.4.1 \\\n  -w pytest-json-ctrf==0.3.5 \\\n"
              "  pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA\n"
              "pip install \\\n    numpy==2.1.0\n")
    staging = verifier_staging(script)
    assert staging.uv_version == "0.9.5" and staging.apt_packages == ["python3"]
    assert staging.replay == ["uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest --version",
                              "pip install numpy==2.1.0"]


def test_a_folder_of_tasks_loads_the_good_ones_and_warns_of_each_bad_one(tmp_path: Path, caplog) -> None:
    _harbor_task(tmp_path / "good", "[verifier]\ntimeout_sec = 5\n")
    _harbor_task(tmp_path / "bad-toml", "[verifier]\ntimeout_sec = \"soon\"\n")
    _harbor_task(tmp_path / "latin1", "", instruction="Café\n".encode("latin-1"))
    with caplog.at_level("WARNING", logger="gymfleet.envs.harbor.task"):
        assert list(load_tasks(tmp_path)) == ["good"]
    warned = sorted(r.getMessage() for r in caplog.records)
    assert len(warned) == 2 and all("\n" not in w for w in warned)
    assert warned[0].startswith("skipping task 'bad-toml'") and "verifier.timeout_sec" in warned[0]
    assert warned[1].startswith("skipping task 'latin1'") and "instruction.md is not UTF-8" in warned[1]
    with pytest.raises(TaskError, match="instruction.md is not UTF-8") as caught:
        load_task(tmp_path / "latin1")
    assert "\n" not in str(caught.value)
    with pytest.raises(TaskError, match="bad-toml"):  # a task named explicitly is not skipped
        load_tasks(tmp_path, ["good", "bad-toml"])
    (tmp_path / "good/task.toml").write_text("[agent\n")
    with pytest.raises(TaskError, match="no valid task at .*: 3 invalid"):
        load_tasks(tmp_path)


def test_a_digest_pinned_from_is_substituted_and_the_digest_recorded() -> None:
    digest = "sha256:" + "ab" * 32
    result = translate(f"FROM ubuntu:24.04@{digest}\nFROM python:3.12-slim@{digest} AS b\n", {})
    assert result.bases == ["base-trixie", "base-trixie"]
    assert result.substitutions[0] == f"ubuntu:24.04@{digest} -> gymfleet/base-trixie"
    assert result.substitutions[1].startswith(f"python:3.12-slim@{digest} -> gymfleet/base-trixie (+")
    with pytest.raises(UnbuildableError, match=r"FROM nvcr.io/nvidia/cuda:12@sha256:\w+ cannot be pulled"):
        translate(f"FROM nvcr.io/nvidia/cuda:12@{digest}\n", {})


def test_a_path_under_home_is_expanded(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    _harbor_task(tmp_path / "tasks/one", "")
    assert list(load_tasks("~/tasks")) == ["one"] and list(load_tasks("~/tasks/o*")) == ["one"]
    assert list(load_tasks("~/tasks/one")) == ["one"]


def test_a_non_root_image_gets_a_verifier_log_folder_its_user_can_write() -> None:
    plan = HarborImageBuilder().plan(load_task(TASKS / "nonroot-user"))
    assert plan.dockerfile.endswith("USER root\nRUN mkdir -p /logs/verifier /solution && chmod 1777 /logs/verifier /solution\nUSER agent\n")
    assert "/logs/verifier" not in HarborImageBuilder().plan(load_task(TASKS / "offline-task")).dockerfile


@pytest.mark.parametrize(("image", "same_as"), [
    ("public.ecr.aws/docker/library/python:3.12-slim", "python:3.12-slim"),
    ("public.ecr.aws/docker/library/ubuntu:24.04", "ubuntu:24.04"),
    ("mirror.gcr.io/library/debian:bookworm-slim", "debian:bookworm-slim"),
    ("mirror.gcr.io/ubuntu:22.04", "ubuntu:22.04"),
    ("docker.io/library/node:20-bookworm", "node:20-bookworm"),
])
def test_registry_mirrors_of_official_images_resolve_like_the_images(image: str, same_as: str) -> None:
    # before: "FROM public.ecr.aws/docker/library/... cannot be pulled here and has no Debian substitute"
    found = substitute(image)
    assert found is not None and found == substitute(same_as)
    assert translate(f"FROM {image}\n", {}).substitutions[0].startswith(f"{image} -> gymfleet/{found.image}")
    assert substitute("public.ecr.aws/acme/python:3.12") is None  # another author's image there is not Docker's


def test_a_python_tag_never_gets_an_older_python_and_says_so() -> None:
    # python:3.12-slim-bookworm got bookworm's Python 3.11, silently
    newer = translate("FROM python:3.12-slim-bookworm\n", {}).substitutions[0]
    assert "gymfleet/base-trixie" in newer and newer.endswith("[python3 is 3.13, not 3.12; Debian trixie, not bookworm]")
    assert translate("FROM python:3.11-slim-bookworm\n", {}).substitutions[0].startswith("python:3.11-slim-bookworm -> gymfleet/base ")
    assert "[" not in translate("FROM python:3.11-slim-bookworm\n", {}).substitutions[0]
    assert translate("FROM python:3.13-slim-bookworm\n", {}).substitutions[0].endswith("[Debian trixie, not bookworm]")


@pytest.mark.parametrize("image", ["ubuntu:24.04", "python:3.12-slim", "debian:bookworm",
                                   "ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624"])
def test_a_tasks_own_apt_lines_get_recommends_as_in_the_official_images(image: str) -> None:
    # the bases turn Recommends off; `apt-get install gcc` on the Ubuntu stand-in then brought no
    # libc6-dev, and a published task compiling C found no stdio.h (its oracle scored 0)
    lines = translate(f"FROM {image}\nRUN apt-get install -y gcc\n", {}).dockerfile.splitlines()
    recommends = lines.index("RUN printf 'APT::Install-Recommends \"true\";\\n' > /etc/apt/apt.conf.d/81gymfleet-harbor-recommends")
    assert recommends < lines.index("RUN apt-get install -y gcc")


def test_an_ubuntu_stand_in_has_procps_as_ubuntus_images_do() -> None:
    # a published task's tests ran `pgrep`; Ubuntu's image has it, Debian's minimal one does not
    assert "ca-certificates procps" in translate("FROM ubuntu:24.04\n", {}).dockerfile
    assert "procps" not in translate("FROM debian:bookworm\n", {}).dockerfile

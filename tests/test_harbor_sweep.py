"""benchmarks/harbor_sweep.py: which tasks count as needing only Debian, PyPI and npm, and a dry run."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "harbor_sweep.py"


@pytest.fixture(scope="module")
def sweep():
    spec = importlib.util.spec_from_file_location("harbor_sweep", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def task(tmp_path: Path, name: str, dockerfile: str) -> Path:
    folder = tmp_path / name
    (folder / "environment").mkdir(parents=True)
    (folder / "tests").mkdir()
    (folder / "instruction.md").write_text("Do it.\n")
    (folder / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 60\n')
    (folder / "environment" / "Dockerfile").write_text(dockerfile)
    (folder / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    return folder


@pytest.mark.parametrize(("dockerfile", "expected"), [
    ("FROM ubuntu:24.04\nRUN apt-get update && apt-get install -y curl\nRUN pip install numpy\n", "debian/pypi/npm"),
    ("FROM python:3.12-slim AS build\nFROM build\nRUN npm i -g left-pad\n", "debian/pypi/npm"),
    # a bespoke image nobody here can see into is not Debian packages, even with no RUN line
    ("FROM ghcr.io/laude-institute/t-bench/deveval:latest\nWORKDIR /app\n",
     "other: FROM ghcr.io/laude-institute/t-bench/deveval:latest"),
    ("FROM debian:bookworm\nRUN curl -L https://github.com/x/y/releases/z.tgz | tar xz\n", "other: github.com"),
    ("FROM debian:bookworm\nRUN git clone https://pypi.org/x\n", "other: git clone"),
    ("FROM ubuntu:24.04\nRUN apt-get install -y software-properties-common && \\\n    add-apt-repository ppa:ansible/ansible\n",
     "other: a Launchpad PPA"),
])
def test_needs_names_what_a_dockerfile_fetches_beyond_debian_pypi_npm(sweep, tmp_path, dockerfile, expected) -> None:
    from gymfleet.envs.harbor.task import load_task

    assert sweep.needs(load_task(task(tmp_path, "t", dockerfile))) == expected


def test_a_dry_run_counts_a_bespoke_base_as_unbuildable_and_not_eligible(sweep, tmp_path, capsys) -> None:
    task(tmp_path, "plain", "FROM ubuntu:24.04\nRUN apt-get install -y jq\n")
    task(tmp_path, "bespoke", "FROM ghcr.io/acme/secret-base:1\n")
    assert sweep.main([str(tmp_path), "--dry-run"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["tasks"] == 2 and summary["needing_only_debian_pypi_npm"] == 1
    assert summary["by_outcome"] == {"translated": 1, "unbuildable": 1}
    assert summary["by_reason"] == {"no substitute for FROM ghcr.io/acme/secret-base": 1}


def test_a_dry_run_marks_malformed_tasks_invalid_and_counts_reasons_by_kind(sweep, tmp_path, capsys) -> None:
    # a non-UTF-8 instruction.md crashed the sweep with a raw UnicodeDecodeError and no summary
    task(tmp_path, "plain", "FROM ubuntu:24.04\n")
    for name in ("bad-a", "bad-b"):
        (task(tmp_path, name, "FROM ubuntu:24.04\n") / "task.toml").write_text("[verifier]\ntimeout_sec = \"soon\"\n")
    (task(tmp_path, "latin1", "FROM ubuntu:24.04\n") / "instruction.md").write_bytes("Café\n".encode("latin-1"))
    assert sweep.main([str(tmp_path), "--dry-run"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["summary"]["by_outcome"] == {"invalid": 3, "translated": 1}
    assert result["summary"]["by_reason"] == {"task.toml does not validate": 2, "instruction.md is not UTF-8 text": 1}
    latin1 = next(r for r in result["rows"] if r["task"] == "latin1")
    assert latin1["outcome"] == "invalid" and "instruction.md is not UTF-8" in latin1["reason"]


@pytest.mark.parametrize(("row", "fault"), [
    ({"outcome": "invalid", "reason": "task 'x': task.toml does not validate: ..."}, "task"),
    ({"outcome": "unbuildable", "reason": "unbuildable: not supported here: environment.gpus = 1 (...)"}, "out of scope"),
    ({"outcome": "unbuildable", "reason": "unbuildable: FROM ghcr.io/a/b cannot be pulled here and has no Debian substitute"},
     "out of scope"),
    ({"outcome": "unbuildable", "reason": "unbuildable: COPY failed: file not found", "needs": "debian/pypi/npm"}, "task"),
    ({"outcome": "unbuildable", "reason": "unbuildable: ... returned a non-zero code: 100", "needs": "other: github.com"},
     "out of scope"),
    ({"outcome": "unbuildable", "reason": "unbuildable: ... returned a non-zero code: 100", "needs": "debian/pypi/npm"},
     "gymfleet"),
    ({"outcome": "nop scored > 0", "test_needs": "offline"}, "task"),
    ({"outcome": "oracle scored < 1", "test_needs": "network: api.example.com"}, "out of scope"),
    ({"outcome": "oracle scored < 1 (its processes were stopped)", "test_needs": "offline"}, "gymfleet"),
    ({"outcome": "ok"}, "none"),
])
def test_each_failure_is_classified_with_a_reason(sweep, row, fault) -> None:
    classified = sweep.classify(row)
    assert classified["fault"] == fault and (fault == "none") == (classified["fault_reason"] == "")


TASKS = Path(__file__).resolve().parent / "envs" / "harbor" / "tasks"


@pytest.mark.docker
@pytest.mark.timeout(1800)
def test_the_sweep_says_when_stopped_processes_or_the_host_are_why(sweep, tmp_path, capsys, docker_available) -> None:
    """A solution that leaves a service for its tests: the row says its processes were stopped,
    and ``--keep-processes`` grades it 1; a task asking for more CPUs than the host has is a
    sandbox that did not start (it was a verifier error)."""
    big = tmp_path / "too-many-cpus"
    shutil.copytree(TASKS / "offline-task", big)
    (big / "task.toml").write_text("[environment]\ncpus = 4096\n")
    assert sweep.main([str(TASKS / "service-task"), "--out", str(tmp_path / "a.json")]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["outcome"] == "oracle scored < 1 (its processes were stopped)" and row["fault"] == "gymfleet"
    assert any("gymfleet-demo-service" in p for p in row["oracle"]["stopped_processes"])
    assert sweep.main([str(TASKS / "service-task"), "--keep-processes", "service-*"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["outcome"] == "ok"
    assert sweep.main([str(big)]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["outcome"] == "sandbox did not start" and row["fault"] == "out of scope", row


def test_a_verifier_that_never_writes_a_reward_is_the_tasks_fault(sweep) -> None:
    row = {"outcome": "verifier error (nop)", "test_needs": "offline", "writes_reward": False,
           "nop": {"error": "the verifier wrote neither /logs/verifier/reward.txt nor reward.json"}}
    assert sweep.classify(row)["fault"] == "task"
    assert sweep.classify({**row, "writes_reward": True})["fault"] == "unclassified"


def test_a_persons_verdict_classifies_what_the_rules_leave_and_nothing_else(sweep, tmp_path, capsys) -> None:
    verdicts = {"wd": {"fault": "task", "reason": "its solution writes into /app, which its image never makes"}}
    left = sweep.classify({"task": "wd", "outcome": "oracle scored < 1", "test_needs": "offline"})
    assert left["fault"] == "unclassified"
    judged = sweep.apply_verdict(left, verdicts)
    assert (judged["fault"], judged["fault_by"]) == ("task", "verdicts") and "/app" in judged["fault_reason"]
    ruled = sweep.classify({"task": "wd", "outcome": "nop scored > 0", "test_needs": "offline"})
    assert sweep.apply_verdict(ruled, {"wd": {"fault": "gymfleet", "reason": "x"}}) == ruled  # rules win
    task(tmp_path / "corpus", "wd", "FROM ubuntu:24.04\n")
    bad = tmp_path / "verdicts.json"
    bad.write_text(json.dumps({"wd": {"fault": "cosmic rays", "reason": "?"}}))
    assert sweep.main([str(tmp_path / "corpus"), "--dry-run", "--verdicts", str(bad)]) == 2
    assert "needs fault (one of task, out of scope, gymfleet)" in capsys.readouterr().err

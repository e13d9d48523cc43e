"""Bad input and a hostile host get one line and exit 2, never a traceback, and lose nothing:
binary garbage for a config, braces in a store URL, a read-only runs/ folder with a PostgreSQL
store, a disk that fills mid-run (resume still finishes the run), `gymfleet train` with a bad
store URL, an adapter every replica refuses and a metrics file that cannot be written during
`gymfleet train` (the run still writes its report, saying why).
The password of a PostgreSQL store is never printed."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sqlalchemy.engine import make_url

from typer.testing import CliRunner

from gymfleet.cli import app
from tests.conftest import require
from tests.e2e.train_helpers import tiny_train_config

ROOT = Path(__file__).resolve().parents[2]


def run_config(tmp_path: Path, n_instances: int = 4, step_delay_s: float = 0.0, **fields: object) -> Path:
    config = {
        "run_id": "bad-input", "store": str(tmp_path / "store.db"), "metrics_path": str(tmp_path / "metrics.jsonl"),
        "max_in_flight": 16, "policy": {"kind": "import", "factory": "tests.orchestrator.fakes:echo_gateway"},
        "tasks": [{"name": "echo", "env_id": "tests.orchestrator.fakes:gymfleet-test/SlowEcho-v0",
                   "env_kwargs": {"n_instances": n_instances, "step_delay_s": step_delay_s}, "group_size": 4}],
        **fields,
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def gymfleet(*args: str, cwd: Path = ROOT, mounts: str = "") -> subprocess.CompletedProcess[str]:
    """Runs the real ``gymfleet`` entry point; with ``mounts``, in a private mount namespace
    (``unshare -m``) where that shell text runs first and ``"$@"`` is the command."""
    cmd = [sys.executable, "-m", "gymfleet.cli", *args]
    if mounts:
        cmd = ["unshare", "-m", "sh", "-c", mounts, "sh", *cmd]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "300"}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def invoke(*args: str) -> subprocess.CompletedProcess[str]:
    """Runs ``gymfleet`` in this process (typer's runner): faster than a subprocess where the
    command needs no mount namespace of its own."""
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)


def assert_one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, no traceback, and exactly one line starting ``error:`` holding ``needles``."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "╭" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def needs_root_mounts() -> None:
    require(os.geteuid() == 0 and shutil.which("unshare") is not None, "root and unshare",
            "run the tests as root (a private mount namespace stands in for a full or read-only disk)")


@pytest.mark.parametrize("command", ["collect", "train"])
def test_binary_garbage_config(tmp_path: Path, command: str) -> None:
    garbage = tmp_path / "garbage.yaml"
    garbage.write_bytes(bytes(range(256)) * 8)
    assert_one_line_error(invoke(command, str(garbage)), "is not text", str(garbage))


def test_braces_in_a_store_url_are_the_users_text(tmp_path: Path) -> None:
    config = run_config(tmp_path, store=str(tmp_path / "st{o}re-{run_id}.db"))
    done = invoke("collect", str(config), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "st{o}re-bad-input.db").exists()  # {run_id} filled in, nothing else touched


def test_train_with_a_bad_store_url(tmp_path: Path) -> None:
    config = tiny_train_config(tmp_path, "bad-store")
    done = invoke("train", str(config), "--set", "store=nosuchdb://alice:s3cret@db/{x}", "--no-progress")
    line = assert_one_line_error(done, "store URL", "postgresql://")
    assert "s3cret" not in done.stderr + done.stdout and "alice:***@" in line
    assert not (tmp_path / "report" / "report.json").exists()  # nothing ran, nothing to report


@pytest.mark.postgres
def test_collect_never_prints_the_database_password(tmp_path: Path, pg_database: str) -> None:
    done = invoke("collect", str(run_config(tmp_path, store=pg_database)), "--no-progress")
    assert done.returncode == 0, done.stderr
    url = make_url(pg_database)
    assert f":{url.password}@" not in done.stdout + done.stderr
    assert f"{url.username}:***@" in done.stderr.strip().splitlines()[-1], done.stderr


@pytest.mark.postgres
def test_read_only_runs_folder_with_a_postgresql_store(tmp_path: Path, pg_database: str) -> None:
    needs_root_mounts()
    (tmp_path / "runs").mkdir()
    config = run_config(tmp_path, store=pg_database, metrics_path="runs/{run_id}/metrics.jsonl")
    done = gymfleet("collect", str(config), "--no-progress", cwd=tmp_path,
                    mounts=f'mount --bind -o ro {tmp_path}/runs {tmp_path}/runs && exec "$@"')
    assert_one_line_error(done, "cannot write runs/bad-input", "Read-only file system")


def test_a_disk_that_fills_mid_run_stops_with_one_line_and_resume_finishes(tmp_path: Path) -> None:
    needs_root_mounts()
    disk = tmp_path / "disk"
    disk.mkdir()
    n_instances = 300  # 1,200 rollouts; the 700 KiB disk holds about 150
    config = run_config(disk, n_instances=n_instances, step_delay_s=0.01, max_in_flight=32)
    # the tmpfs lives in the command's own mount namespace: copy what it left before it goes
    saved = tmp_path / "run.yaml"
    shutil.copy(config, saved)
    done = gymfleet("collect", str(saved), "--no-progress",
                    mounts=f'mount -t tmpfs -o size=700k tmpfs {disk} && "$@"; rc=$?; cp -a {disk} {tmp_path}/left; exit $rc')
    assert_one_line_error(done, "cannot write any more", "database or disk is full", "run the same command again")
    left = tmp_path / "left"
    with sqlite3.connect(left / "store.db") as conn:
        kept = conn.execute("SELECT count(*) FROM trajectories WHERE status = 'ok'").fetchone()[0]
    assert kept > 0  # what was written survived
    resumed = run_config(left, n_instances=n_instances)
    done = invoke("collect", str(resumed), "--no-progress")
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(left / "store.db") as conn:
        assert conn.execute("SELECT count(*) FROM trajectories WHERE status = 'ok'").fetchone()[0] == n_instances * 4


def test_an_adapter_every_replica_refuses_is_skipped_and_the_run_goes_on_to_its_report(tmp_path: Path) -> None:
    """The run goes on to its report, then exits 3 with the reason: its policy could not load."""
    config = tiny_train_config(tmp_path, "refused",
                               policy={"kind": "import", "factory": "tests.orchestrator.fakes:adapter_refusing_gateway"},
                               adapter_load={"attempts": 2, "retry_wait_s": 0.05})
    done = invoke("train", str(config), "--no-progress")
    assert done.returncode == 3, (done.stdout, done.stderr)
    said = " ".join(done.stderr.split())  # rich wraps long lines
    assert "the policy could not be loaded: v" in said and "Traceback" not in said, done.stderr
    assert "skipped" in said and "v0 keeps being served, the run goes on" in said, done.stderr
    assert "adapter versions not loaded: v1" in said and "(engines serve v0)" in said, done.stderr
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["run_status"] == "completed (budget)" and report["adapter_loads"] == []
    assert report["adapter_load_failures"]
    assert all("failed to load on every replica" in f["error"] for f in report["adapter_load_failures"])


def test_a_train_run_whose_collection_stops_on_a_full_disk_says_so_and_reports(tmp_path: Path) -> None:
    # /dev/full: every write of the metrics file is ENOSPC, so the scheduler stops the collection
    # at its first event. The job once called that run "interrupted" and exited 0.
    config = tiny_train_config(tmp_path, "full", metrics_path="/dev/full",
                               policy={"kind": "import", "factory": "tests.orchestrator.fakes:echo_gateway"})
    done = invoke("train", str(config), "--no-progress")
    assert_one_line_error(done, "/dev/full", "No space left on device")
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["run_status"] == "interrupted" and "No space left on device" in report["error"]


@pytest.mark.parametrize("args", [("--set", "tasks.0.weight=[1,"), ("--run-id", "[1,"), ("--set", "a={b: [")])
def test_malformed_yaml_in_set_or_run_id_is_one_line(tmp_path: Path, args: tuple[str, str]) -> None:
    # Before: yaml's ParserError escaped as a 117-155-line traceback, exit 1.
    r = invoke("collect", str(run_config(tmp_path)), *args)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    # --run-id is the id as typed (never parsed as YAML): the run-id pattern names what is wrong
    assert ("not valid YAML" in lines[0]) if args[0] == "--set" else ("run_id" in lines[0])


def test_a_huge_config_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    # Before: a 2 GB file was read and parsed whole (no output for 300 s, 4.5 GB of memory).
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(2 << 30)  # sparse: 2 GB on paper, nothing on disk
    for command in ("train", "collect"):
        r = invoke(command, str(big))
        assert r.returncode == 2 and "larger than 1 MiB" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr

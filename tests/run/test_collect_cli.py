"""`gymfleet collect` in a subprocess: SIGKILL mid-run and restart, SIGTERM, and `gymfleet runs`."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import datasets
import pytest
import yaml
from typer.testing import CliRunner

from gymfleet.cli import app

ROOT = Path(__file__).resolve().parents[2]
N_INSTANCES, GROUP = 30, 4


def write_config(tmp_path: Path, step_delay_s: float = 0.1, **fields) -> Path:
    config = {
        "run_id": "kill-test",
        "store": str(tmp_path / "store.db"),
        "metrics_path": str(tmp_path / "metrics.jsonl"),
        "max_in_flight": 8,
        "metrics_interval_s": 0.5,
        "policy": {"kind": "import", "factory": "tests.orchestrator.fakes:echo_gateway"},
        "tasks": [{
            "name": "echo", "env_id": "tests.orchestrator.fakes:gymfleet-test/SlowEcho-v0",
            "env_kwargs": {"n_instances": N_INSTANCES, "step_delay_s": step_delay_s}, "group_size": GROUP,
        }],
        **fields,
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def gymfleet(*args: str) -> list[str]:
    return [sys.executable, "-m", "gymfleet.cli", *args]


def env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}


def count_ok(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as conn:
        try:
            return conn.execute("SELECT count(*) FROM trajectories WHERE status = 'ok'").fetchone()[0]
        except sqlite3.OperationalError:  # tables not created yet
            return 0


def wait_for_ok(proc: subprocess.Popen, db: Path, n: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while count_ok(db) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "collection made no progress"
        time.sleep(0.05)


def rows(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchall()


def test_sigkill_mid_run_then_restart_loses_and_repeats_nothing(tmp_path: Path) -> None:
    config, db = write_config(tmp_path), tmp_path / "store.db"
    proc = subprocess.Popen(gymfleet("collect", str(config), "--no-progress"), cwd=tmp_path, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for_ok(proc, db, 24)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    before = dict(rows(db, "SELECT rollout_id, hex(token_ids) FROM trajectories WHERE status = 'ok'"))
    assert 24 <= len(before) < N_INSTANCES * GROUP

    done = subprocess.run(gymfleet("collect", str(config), "--no-progress"), cwd=tmp_path, env=env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    after = dict(rows(db, "SELECT rollout_id, hex(token_ids) FROM trajectories WHERE status = 'ok'"))
    assert all(after[rid] == tokens for rid, tokens in before.items())  # every finished one kept, unchanged
    per_sample = rows(db, "SELECT sample_id, count(*) FROM trajectories WHERE status = 'ok' GROUP BY sample_id")
    assert len(per_sample) == N_INSTANCES * GROUP and {n for _, n in per_sample} == {1}
    assert set(rows(db, "SELECT DISTINCT status FROM trajectories")) <= {("ok",), ("aborted",)}
    aborted = rows(db, "SELECT sample_id FROM trajectories WHERE status = 'aborted'")
    assert all((sid,) in {(s,) for s, _ in per_sample} for (sid,) in aborted)  # aborted ones were redone
    assert rows(db, "SELECT status, n_starts FROM runs") == [("completed", 2)]
    assert rows(db, "SELECT count(*) FROM groups WHERE completed_at IS NOT NULL") == [(N_INSTANCES,)]


def test_sigterm_stops_gracefully_and_runs_show_and_export_read_the_run(tmp_path: Path) -> None:
    config, db = write_config(tmp_path, step_delay_s=0.2, shutdown={"mode": "abort", "deadline_s": 5}), tmp_path / "store.db"
    proc = subprocess.Popen(gymfleet("collect", str(config), "--no-progress"), cwd=tmp_path, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for_ok(proc, db, 8)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 3, out  # interrupted
    assert "interrupted" in out
    statuses = dict(rows(db, "SELECT status, count(*) FROM trajectories GROUP BY status"))
    assert statuses.get("aborted", 0) >= 1 and rows(db, "SELECT status FROM runs") == [("interrupted",)]

    show = subprocess.run(gymfleet("runs", "show", "kill-test", "--store", str(db), "--n", "1", "--status", "ok"),
                          cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
    assert show.returncode == 0, show.stderr
    assert "assistant" in show.stdout and "status ok" in show.stdout and "reward 1" in show.stdout
    listing = subprocess.run(gymfleet("runs", "list", "--store", str(db)), cwd=tmp_path, env=env(),
                             capture_output=True, text=True, timeout=120)
    assert "kill-test" in listing.stdout
    out_file = tmp_path / "export.parquet"
    export = subprocess.run(gymfleet("runs", "export", "kill-test", str(out_file), "--format", "parquet",
                                     "--status", "ok", "--store", str(db)),
                            cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
    assert export.returncode == 0, export.stderr
    ds = datasets.load_dataset("parquet", data_files=str(out_file), split="train")
    assert len(ds) == statuses["ok"] and set(ds["status"]) == {"ok"}


def test_bad_config_fails_clearly(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_in_flight=0)
    result = CliRunner().invoke(app, ["collect", str(config), "--no-progress"])
    assert result.exit_code == 2
    assert "max_in_flight" in result.output and "greater than or equal to 1" in result.output


@pytest.mark.parametrize("override", ["tasks.5.weight=1", "nonsense"])
def test_bad_override_fails_clearly(tmp_path: Path, override: str) -> None:
    config = write_config(tmp_path)
    result = CliRunner().invoke(app, ["collect", str(config), "--set", override])
    assert result.exit_code == 2 and "override" in result.output


def test_unknown_env_id_fails_clearly(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    result = CliRunner().invoke(app, ["collect", str(config), "--set", "tasks.0.env_id=gymfleet/Nope-v0"])
    assert result.exit_code == 2, result.output
    assert "task echo: env_id: unknown env id 'gymfleet/Nope-v0'" in " ".join(result.output.split())


@pytest.mark.parametrize("where", ["under-a-file", "refused"])
def test_store_that_cannot_be_opened_fails_clearly(tmp_path: Path, where: str) -> None:
    (tmp_path / "afile").write_text("")
    store = str(tmp_path / "afile" / "store.db") if where == "under-a-file" else "postgresql://u:secret@127.0.0.1:1/db"
    result = CliRunner().invoke(app, ["collect", str(write_config(tmp_path)), "--no-progress", "--store", store])
    assert result.exit_code == 2, result.output
    assert "error: cannot " in result.output and "store" in result.output and "secret" not in result.output


def test_piped_output_prints_progress_lines_while_it_runs(tmp_path: Path) -> None:
    config = write_config(tmp_path, step_delay_s=0.3, max_in_flight=4)
    log = tmp_path / "collect.log"
    with log.open("w") as out:  # not a terminal: plain lines instead of a live table
        proc = subprocess.Popen(gymfleet("collect", str(config), "--progress-every", "0.5"), cwd=tmp_path,
                                env=env(), stdout=out, stderr=subprocess.STDOUT, text=True)
        seen_running: list[str] = []
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline and len(seen_running) < 3:
            seen_running = [line for line in log.read_text().splitlines() if line.startswith("[kill-test ")]
            time.sleep(0.1)
        proc.terminate()
        proc.wait(timeout=60)
    assert len(seen_running) >= 3, log.read_text()  # lines appear while the run goes on, not only at the end
    assert all(" done" in line and " · in flight " in line and " · reward " in line for line in seen_running)
    assert "\x1b[" not in log.read_text()  # no terminal control sequences in a log file

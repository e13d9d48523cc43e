"""One run, many orchestrators: several `gymfleet collect` processes on one run and one store.

On PostgreSQL they split the samples (each run by one of them, no duplicate key ever logged) and
a survivor finishes a killed peer's samples once its lease runs out; on SQLite a second live one
is refused with one line naming PostgreSQL.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import psql_command
from tests.run.test_collect_cli import GROUP, N_INSTANCES, count_ok, env, gymfleet, rows, write_config

LEASE_S = 2.0
N_SAMPLES = N_INSTANCES * GROUP


def pg(url: str, sql: str) -> list[tuple[str, ...]]:
    """Rows of ``sql`` in the store ``url``, every field as text."""
    psql, psql_env = psql_command(url)
    done = subprocess.run([*psql, "-At", "-F", "\t", "-c", sql], env=psql_env, capture_output=True, text=True,
                          timeout=60, check=True)
    return [tuple(line.split("\t")) for line in done.stdout.splitlines() if line]


def pg_count_ok(url: str) -> int:
    try:
        return int(pg(url, "SELECT count(*) FROM trajectories WHERE status = 'ok'")[0][0])
    except subprocess.CalledProcessError:  # tables not created yet
        return 0


def running_under(url: str, collector: Collector) -> int:
    """Samples the collector is running now (its leases name its pid: ``host:pid:token``)."""
    return int(pg(url, "SELECT count(*) FROM samples WHERE state = 'running' "
                       f"AND lease_owner LIKE '%:{collector.proc.pid}:%'")[0][0])


class Collector:
    """One `gymfleet collect` process, its output in files (a pipe could fill and stall it)."""

    def __init__(self, tmp_path: Path, name: str, config: Path) -> None:
        self.out, self.err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen(gymfleet("collect", str(config), "--no-progress"), cwd=tmp_path,
                                         env=env(), stdout=out, stderr=err, text=True)

    def wait(self, timeout_s: float = 300) -> int:
        return self.proc.wait(timeout=timeout_s)

    def freeze_if_running(self, url: str) -> bool:
        """Stops the process (SIGSTOP) if it is running a rollout now; True when it is stopped."""
        self.proc.send_signal(signal.SIGSTOP)
        if running_under(url, self) > 0:
            return True
        self.proc.send_signal(signal.SIGCONT)
        return False

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)  # reaped: its pid is gone

    @property
    def output(self) -> str:
        return self.out.read_text() + self.err.read_text()

    def n_completed(self) -> int:
        """Rollouts this process ended, from its summary line (``run X: completed, N rollouts``)."""
        line = next(line for line in self.output.splitlines() if line.startswith("run kill-test: "))
        return int(line.split(", ", 1)[1].split(" rollouts", 1)[0])

    def assert_no_error_logged(self) -> None:
        text = self.output
        for bad in ("UniqueViolation", "Traceback", "duplicate key", "ERROR"):
            assert bad not in text, text


def wait_until(done: callable, procs: list[Collector], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        for c in procs:
            assert c.proc.poll() is None, c.output
        assert time.monotonic() < deadline, "collection made no progress"
        time.sleep(0.1)


def assert_each_sample_once(url: str) -> list[tuple[str, ...]]:
    per_sample = pg(url, "SELECT sample_id, count(*) FROM trajectories WHERE status = 'ok' GROUP BY sample_id")
    assert len(per_sample) == N_SAMPLES and {n for _, n in per_sample} == {"1"}
    assert pg(url, "SELECT count(*) FROM samples WHERE state <> 'done'") == [("0",)]
    assert pg(url, "SELECT count(*) FROM groups WHERE completed_at IS NOT NULL") == [(str(N_INSTANCES),)]
    return per_sample


@pytest.mark.postgres
def test_two_collectors_on_one_postgresql_run_split_the_samples(tmp_path: Path, pg_database: str) -> None:
    # Slow enough (~15 s alone) that the second has long started when the first is half done.
    config = write_config(tmp_path, step_delay_s=0.5, store=pg_database, lease_s=LEASE_S)
    a, b = Collector(tmp_path, "a", config), Collector(tmp_path, "b", config)
    assert a.wait() == 0, a.output
    assert b.wait() == 0, b.output
    for c in (a, b):
        c.assert_no_error_logged()
    assert_each_sample_once(pg_database)
    assert pg(pg_database, "SELECT DISTINCT status FROM trajectories") == [("ok",)]  # nobody aborted anybody
    assert a.n_completed() > 0 and b.n_completed() > 0  # both did some ...
    assert a.n_completed() + b.n_completed() == N_SAMPLES  # ... and none twice
    assert pg(pg_database, "SELECT status, n_starts FROM runs") == [("completed", "2")]


@pytest.mark.postgres
def test_a_killed_collectors_samples_are_finished_by_its_peer_after_the_lease(
    tmp_path: Path, pg_database: str,
) -> None:
    config = write_config(tmp_path, step_delay_s=0.5, store=pg_database, lease_s=LEASE_S)  # lasts ~8 s
    a, b = Collector(tmp_path, "a", config), Collector(tmp_path, "b", config)
    # Both started (else b's start would requeue a's samples at once, its process being gone).
    wait_until(lambda: pg_count_ok(pg_database) >= 16 and running_under(pg_database, a) > 0
               and running_under(pg_database, b) > 0, [a, b])
    # Killed while it runs some: frozen first, so that its rollouts cannot end between the look
    # and the kill (on a loaded machine they did, and nothing was left in flight to abort).
    wait_until(lambda: a.freeze_if_running(pg_database), [b])
    a.kill()
    killed_at = time.monotonic()
    held_by_a = pg(pg_database, "SELECT sample_id, state, rollout_id FROM samples "
                                f"WHERE lease_owner LIKE '%:{a.proc.pid}:%'")
    assert b.wait() == 0, b.output
    b.assert_no_error_logged()
    assert_each_sample_once(pg_database)
    aborted = pg(pg_database, "SELECT sample_id, reason FROM trajectories WHERE status = 'aborted'")
    assert aborted, ("the killed collector had rollouts in flight: its peer records them aborted", held_by_a,
                     pg(pg_database, "SELECT status, count(*) FROM trajectories GROUP BY status"), b.output[-3000:])
    assert all("lease" in reason for _, reason in aborted)
    assert time.monotonic() - killed_at >= LEASE_S * 0.5  # the peer waited for the lease, not less


def test_a_second_collector_on_a_sqlite_run_is_refused_until_the_first_is_gone(tmp_path: Path) -> None:
    config, db = write_config(tmp_path, step_delay_s=1.0), tmp_path / "store.db"  # slow: still running
    first = Collector(tmp_path, "first", config)
    wait_until(lambda: count_ok(db) >= 4, [first])
    second = subprocess.run(gymfleet("collect", str(config), "--no-progress"), cwd=tmp_path, env=env(),
                            capture_output=True, text=True, timeout=120)
    assert first.proc.poll() is None, first.output
    assert second.returncode == 2, second.stdout + second.stderr
    errors = [line for line in second.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in second.stderr, second.stderr
    assert "held by another live orchestrator" in errors[0] and "use a PostgreSQL store" in errors[0]
    assert rows(db, "SELECT DISTINCT status FROM trajectories") == [("ok",)]  # the first one was left alone

    first.kill()  # dead: its run resumes at once (same host, its process is gone)
    third = subprocess.run(gymfleet("collect", str(config), "--no-progress", "--set", "tasks.0.env_kwargs.step_delay_s=0.01"),
                           cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=300)
    assert third.returncode == 0, third.stdout + third.stderr
    per_sample = rows(db, "SELECT sample_id, count(*) FROM trajectories WHERE status = 'ok' GROUP BY sample_id")
    assert len(per_sample) == N_SAMPLES and {n for _, n in per_sample} == {1}

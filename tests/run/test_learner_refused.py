"""A learner that cannot start (the run's seat is held by another live learner) stops in one line:
its error row in learner.jsonl, exit status 2 (``EXIT_REFUSED``), no traceback on the terminal, and
`gymfleet train` says why instead of "run the same command again" (which failed again). Real
learner process (spawned), store and seat; the holder is this test's own live process."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.orchestrator.store.claims import new_learner_id
from gymfleet.run.config import load_train_config
from gymfleet.run.learner import ProcessLearner
from gymfleet.run.records import TrainReport
from gymfleet.run.verdict import no_learning_reason
from gymfleet.trainer import EXIT_REFUSED
from tests.e2e.train_helpers import tiny_train_config


async def test_a_learner_refused_its_seat_stops_in_one_line(tmp_path: Path, capfd) -> None:
    cfg = load_train_config(tiny_train_config(tmp_path, "seated"))
    async with await TrajectoryStore.open(cfg.run.store) as store:
        await store.start_run("seated", cfg.run.model_dump(mode="json"))
        await store.take_learner_seat("seated", new_learner_id(), 600.0)  # this live process holds it
    learner = ProcessLearner(cfg.worker_args())
    learner.start()
    assert await learner.wait(timeout_s=120) == EXIT_REFUSED
    rows = [json.loads(line) for line in (tmp_path / "report" / "learner.jsonl").read_text().splitlines()]
    assert rows[-1]["event"] == "error" and "already has a live learner" in rows[-1]["message"]
    assert "Traceback" not in capfd.readouterr().err
    assert "stopped on an error" in (no_learning_reason(TrainReport("seated", "async", learner_exitcode=EXIT_REFUSED))
                                     or "")

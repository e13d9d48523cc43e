"""Env text enters the trajectory clean: a lone surrogate in an observation (a hostile page's text)
is replaced at the boundary, so the rollout ends normally, its env is closed, and the run exports."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from gymfleet.core.records import Message, RolloutStatus
from gymfleet.orchestrator.rollout import Rollout, RolloutRequest
from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.run.collection import collect
from tests.orchestrator.conftest import run_config, task
from tests.orchestrator.fakes import LoneSurrogateEnv, ScriptedGateway, ScriptedSession, say_the_word


class Utf8Session(ScriptedSession):
    """Encodes every message as UTF-8 first, as a real tokenizer does (a lone surrogate raises)."""

    def _append(self, text: str, *, generated: bool) -> None:
        text.encode("utf-8")
        super()._append(text, generated=generated)


class Utf8Gateway(ScriptedGateway):
    def open_session(self, rollout_id: str, messages: list[Message]) -> Utf8Session:
        return Utf8Session(self, rollout_id, messages)


async def test_a_lone_surrogate_in_an_observation_ends_the_rollout_normally() -> None:
    env = LoneSurrogateEnv(n_instances=1)
    request = RolloutRequest("r", "g", "r-0", "gymfleet-test/LoneSurrogate-v0", "w000")
    traj = await Rollout(request, lambda: env, Utf8Gateway(say_the_word)).run()
    assert traj.status is RolloutStatus.ok and traj.reward == 1.0, traj.reason
    assert env.closed
    text = json.dumps([m.content for m in traj.messages] + [traj.metrics], ensure_ascii=False)
    text.encode("utf-8")  # nothing unencodable is left
    assert "page: \ufffd!" in text and "x\ufffdy" in text


async def test_a_run_with_lone_surrogates_exports_to_jsonl_and_parquet(tmp_path: Path) -> None:
    config = run_config(tmp_path, [task("pages", env="LoneSurrogate-v0", env_kwargs={"n_instances": 2},
                                        group_size=2)],
                        policy={"kind": "import", "factory": "tests.orchestrator.fakes:echo_gateway"})
    outcome = await collect(config, live=False)
    assert outcome.by_status == {"ok": 4}, outcome
    async with await TrajectoryStore.open(config.store) as store:
        assert await store.export(config.run_id, tmp_path / "out.jsonl", "jsonl") == 4
        assert await store.export(config.run_id, tmp_path / "out.parquet", "parquet") == 4
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert all("\ufffd" in r["messages"][1]["content"] for r in rows)
    assert pq.read_table(tmp_path / "out.parquet").num_rows == 4


async def test_a_store_written_before_the_cleaning_still_exports(tmp_path: Path) -> None:
    from gymfleet.core.records import Trajectory
    from gymfleet.orchestrator.store import GroupSpec

    async with await TrajectoryStore.open(str(tmp_path / "old.db")) as store:
        await store.start_run("old", {})
        group = GroupSpec("old/echo/p0/a", "old", "echo", "e", "a", 1)
        store.create_group(group)
        (sample_id,) = group.sample_ids()
        traj = Trajectory("old/echo/p0/a/0/a1", "old", group.group_id, "e", "a",
                          messages=[Message("user", "page \ud800")])
        store.start_sample(sample_id, traj.rollout_id)
        async with store.engine.begin() as conn:  # as an older writer stored it, uncleaned
            from gymfleet.orchestrator.store.schema import TrajectoryRow
            from gymfleet.orchestrator.store.codec import to_values

            values = {**to_values(traj, sample_id=sample_id, task="echo"),  # JSON escapes a lone surrogate
                      "messages": [{"role": "user", "content": "page \ud800"}], "metrics": {"t": "x\udfff"}}
            await conn.execute(TrajectoryRow.__table__.insert().values(**values))
        assert await store.export("old", tmp_path / "old.jsonl", "jsonl") == 1
        assert await store.export("old", tmp_path / "old.parquet", "parquet") == 1
    assert "page \ufffd" in (tmp_path / "old.jsonl").read_text(encoding="utf-8")

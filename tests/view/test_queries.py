"""The viewer's read-only queries over a real store (SQLite; one test on PostgreSQL too)."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
import torch
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine

from gymfleet.core.records import RolloutStatus
from gymfleet.orchestrator.store import GroupSpec, TrajectoryStore
from gymfleet.orchestrator.store.engine import normalise_url
from gymfleet.trainer.loss import group_advantages as learner_advantages
from gymfleet.view import StoreSet, create_app, queries
from gymfleet.view.errors import NotFoundError, ViewError
from gymfleet.view.records import Cursor, TrajectoryFilters, group_advantages
from gymfleet.view.stores import open_readonly
from gymfleet.view.tokens import IdsOnly
from tests.view.synthetic import Turn, fill_run, trajectory


@pytest.fixture
async def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "r" / "store.db"
    async with await TrajectoryStore.open(str(path)) as store:
        await fill_run(store, "r", 30, seed=3)
        group = GroupSpec("r/terminal/p1/odd", "r", "terminal", "gymfleet/TerminalEasy-v0", "odd", 1)
        store.create_group(group)
        odd = trajectory("r", group.group_id, 0, env_id=group.env_id, instance_id="odd", version=2, reward=0.5,
                         turns=[Turn("echo 'naïve 100%_done'", "ok")])
        store.start_sample(group.sample_ids()[0], odd.rollout_id)
        store.add(odd, sample_id=group.sample_ids()[0], task="terminal")
    return path


async def test_keyset_pages_cover_every_trajectory_once_newest_first(store_path: Path) -> None:
    engine = open_readonly(str(store_path))
    async with engine.connect() as conn:
        seen, before = [], None
        while True:
            page = await queries.trajectory_page(conn, "r", TrajectoryFilters(), before=before, limit=7)
            seen += page
            if len(page) < 7:
                break
            before = Cursor.decode(page[-1].cursor)
        n = await conn.scalar(text("SELECT count(*) FROM trajectories"))
        assert len(seen) == len({t.rollout_id for t in seen}) == n == 121
        assert [t.created_at for t in seen] == sorted((t.created_at for t in seen), reverse=True)
        newer = await queries.trajectory_page(conn, "r", TrajectoryFilters(), after=Cursor.decode(seen[5].cursor))
        assert [t.rollout_id for t in newer] == [t.rollout_id for t in reversed(seen[:5])]
    await engine.dispose()


async def test_filters_by_task_status_reward_version_and_text(store_path: Path) -> None:
    engine = open_readonly(str(store_path))
    async with engine.connect() as conn:
        async def ids(**f: object) -> list:
            return await queries.trajectory_page(conn, "r", TrajectoryFilters(**f), limit=500)

        everything = await ids()
        assert {t.task for t in await ids(task="miniwob")} == {"miniwob"}
        assert all(t.status == "infra_error" for t in await ids(status="infra_error"))
        assert all(t.reward >= 0.5 for t in await ids(min_reward=0.5))
        assert [t.instance_id for t in await ids(min_reward=0.25, max_reward=0.75)] == ["odd"]
        v2 = await ids(version=2)
        assert v2 and all(t.policy_version_min <= 2 <= t.policy_version_max for t in v2)
        assert len(v2) < len(everything)
        assert [t.instance_id for t in await ids(text="NAÏVE 100%_DONE")] == ["odd"]  # non-ASCII, %, _, any case
        assert await ids(text="100%x") == []
        assert len(await ids(text="click")) == sum(t.task == "miniwob" for t in everything)
    await engine.dispose()


async def test_group_advantages_are_the_learner_s(store_path: Path) -> None:
    rewards = [1.0, 0.0, 0.0, 1.0, 0.5]
    ours = group_advantages(rewards)
    assert ours == pytest.approx(learner_advantages(torch.tensor(rewards)).tolist(), abs=1e-6)
    assert group_advantages([1.0, None, 0.0]) == pytest.approx([1.0, None, -1.0], abs=1e-5)
    engine = open_readonly(str(store_path))
    async with engine.connect() as conn:
        groups = await queries.groups_page(conn, "r", limit=50)
        assert len(groups) == 31 and groups[0].group_id == "r/terminal/p1/odd"
        for g in groups:
            trained = [s for s in g.samples if s.trajectory.trains]
            expected = learner_advantages(torch.tensor([s.trajectory.reward for s in trained])).tolist() if trained else []
            assert [s.advantage for s in trained] == pytest.approx(expected, abs=1e-5)
            assert all(s.advantage is None for s in g.samples if not s.trajectory.trains)
        deeper = await queries.groups_page(conn, "r", before=Cursor.decode(groups[9].cursor), limit=50)
        assert [g.group_id for g in deeper] == [g.group_id for g in groups[10:]]
    await engine.dispose()


async def test_run_overview_tallies_and_missing_rows(store_path: Path) -> None:
    engine = open_readonly(str(store_path))
    async with engine.connect() as conn:
        overview = await queries.run_overview(conn, "r")
        assert overview.run.n_groups == overview.run.n_groups_complete == 31
        assert sum(overview.run.by_status.values()) == 121
        assert {p.task for p in overview.rewards} == {"terminal", "miniwob"}
        assert sum(p.n for p in overview.rewards) == sum(n for s, n in overview.run.by_status.items()
                                                          if s in ("ok", "truncated"))
        assert overview.newest_version == 7 and sum(overview.version_lag.values()) == 121
        with pytest.raises(NotFoundError):
            await queries.run_overview(conn, "nope")
        with pytest.raises(NotFoundError):
            await queries.trajectory_detail(conn, "r", "nope")
        with pytest.raises(NotFoundError):
            await queries.group_detail(conn, "nope", "r/terminal/p1/odd")  # another run's id never reads it
    with pytest.raises(ViewError):
        Cursor.decode("not-a-cursor")
    await engine.dispose()


async def test_the_viewer_cannot_write(store_path: Path) -> None:
    engine = open_readonly(str(store_path))
    async with engine.connect() as conn:
        with pytest.raises(DBAPIError, match="readonly|read-only|query_only|attempt to write"):
            await conn.execute(text("DELETE FROM trajectories"))
    await engine.dispose()
    app = create_app(StoreSet(None, store_path.parent.parent), IdsOnly())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        assert (await client.delete("/api/runs/r")).status_code == 405
        assert (await client.get("/api/runs/r/trajectories", params={"limit": "x"})).status_code == 400
        assert (await client.get("/api/runs/r/trajectories", params={"status": "great"})).status_code == 400
        assert (await client.get("/api/runs/r/trajectory", params={"id": "nope"})).status_code == 404
        evil = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://evil.example")
        assert (await evil.get("/api/runs")).status_code == 400  # a DNS-rebound page cannot read the API
        await evil.aclose()


@pytest.mark.postgres
async def test_the_same_pages_on_postgresql(pg_url: str) -> None:
    schema = f"view_{uuid.uuid4().hex[:10]}"
    async with await TrajectoryStore.open(pg_url, schema=schema) as store:
        await fill_run(store, "pg", 5, seed=1)
    url = normalise_url(pg_url)
    engine = open_readonly(url, schema=schema)
    try:
        async with engine.connect() as conn:
            page = await queries.trajectory_page(conn, "pg", TrajectoryFilters(text="CLICK", status=RolloutStatus.ok))
            assert page and all(t.task == "miniwob" for t in page)
            overview = await queries.run_overview(conn, "pg")
            assert sum(overview.run.by_status.values()) == 20
            groups = await queries.groups_page(conn, "pg")
            assert len(groups) == 5 and all(len(g.samples) == 4 for g in groups)
            older = await queries.groups_page(conn, "pg", before=Cursor.decode(groups[1].cursor))
            assert [g.group_id for g in older] == [g.group_id for g in groups[2:]]
            rows = await queries.trajectory_page(conn, "pg", TrajectoryFilters())
            older_rows = await queries.trajectory_page(conn, "pg", TrajectoryFilters(), before=Cursor.decode(rows[4].cursor))
            assert [t.rollout_id for t in older_rows] == [t.rollout_id for t in rows[5:]]
            with pytest.raises(DBAPIError, match="read-only"):
                await conn.execute(text("DELETE FROM trajectories"))
    finally:
        await engine.dispose()
        cleanup = create_async_engine(url)
        async with cleanup.begin() as conn:
            await conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await cleanup.dispose()


async def test_tokens_are_ids_when_the_run_s_tokenizer_is_not_here(tmp_path: Path) -> None:
    from gymfleet.view.tokens import RunTokenizer

    decoder = RunTokenizer()
    pieces, why = await decoder.pieces({"policy": {"model": str(tmp_path / "no-model")}}, [1, 2, 3])
    assert pieces is None and "not loadable here" in why and "no-model" in why
    pieces, why = await decoder.pieces({"policy": {"model": {"nme_or_path": "x"}}}, [1])
    assert pieces is None and "policy.model" in why

"""`collect` with the real embedded model through the TITO gateway (the default policy)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gymfleet.core.records import RolloutStatus
from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.orchestrator.store.schema import RunStatus
from gymfleet.run.collection import collect
from tests.orchestrator.conftest import run_config, task


@pytest.mark.model
async def test_collect_with_the_embedded_model_writes_token_exact_trajectories(tmp_path: Path) -> None:
    cfg = run_config(
        tmp_path,
        [task("echo", group_size=2, env_kwargs={"n_instances": 2, "turns": 2},
              sampling={"max_new_tokens": 6}, turn_timeout_s=120)],
        max_in_flight=4,
        policy={"kind": "embedded", "engines": [{"kind": "transformers", "max_batch_size": 4}]},
    )
    outcome = await collect(cfg, live=False)
    assert outcome.status is RunStatus.completed and outcome.by_status == {"ok": 4}
    async with await TrajectoryStore.open(cfg.store) as store:
        stored = await store.trajectories("r1", limit=None)
    assert len(stored) == 4
    for s in stored:
        traj = s.trajectory
        assert traj.status is RolloutStatus.ok
        generated = traj.loss_mask.astype(bool)
        assert 2 <= generated.sum() <= 12  # two turns of at most 6 tokens
        assert np.all(traj.logprobs[generated] <= 0) and np.all(traj.logprobs[~generated] == 0)
        assert np.all(traj.versions[generated] == 0) and np.all(traj.versions[~generated] == -1)
        assert [m.role for m in traj.messages][:3] == ["system", "user", "assistant"]
        assert traj.metrics["n_turns"] == 2


@pytest.mark.model
async def test_collect_with_a_missing_adapter_is_a_config_error(tmp_path: Path) -> None:
    from gymfleet.core.errors import ConfigError

    cfg = run_config(
        tmp_path,
        [task("echo", group_size=1, env_kwargs={"n_instances": 1})],
        policy={"kind": "embedded", "adapter": str(tmp_path / "no-such-adapter")},
    )
    with pytest.raises(ConfigError, match="policy.adapter .*no-such-adapter.*adapter_config.json"):
        await collect(cfg, live=False)

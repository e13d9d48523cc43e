"""Each turn of a rollout draws fresh randomness, and a rerun of the same rollout ids draws the same.

The whole chain is real: the scheduler derives the request, the rollout drives a two-turn env,
the gateway seeds each turn (gymfleet.core.sampling.turn_seed) and the in-process
TransformersEngine samples from the embedded model at temperature 1. Before the fix every turn
reused the rollout's one seed, and the second reply copied the first token for token.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gymfleet.orchestrator.engines.transformers_engine import TransformersEngine, TransformersEngineConfig
from gymfleet.orchestrator.envfactory import env_factory, resolve_instances
from gymfleet.orchestrator.gateway import Gateway, GatewayConfig
from gymfleet.orchestrator.scheduler import Scheduler
from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.orchestrator.store.schema import RunStatus
from tests.orchestrator.conftest import run_config, task

pytestmark = [pytest.mark.model, pytest.mark.timeout(900)]
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 12}


def turns(token_ids: np.ndarray, loss_mask: np.ndarray) -> list[list[int]]:
    """The generated tokens of each assistant turn (the runs of loss mask 1)."""
    out: list[list[int]] = []
    previous = 0
    for token, mask in zip(token_ids.tolist(), loss_mask.tolist()):
        if mask and not previous:
            out.append([])
        if mask:
            out[-1].append(token)
        previous = mask
    return out


async def run_two_turn_rollouts(tmp_path: Path, engine: TransformersEngine, tokenizer: Any) -> dict[str, list[list[int]]]:
    """One scheduler run of 2 instances x 2 samples of a two-turn env; each rollout's turns."""
    cfg = run_config(tmp_path, [task("two", env_kwargs={"n_instances": 2, "turns": 2}, group_size=2,
                                     sampling=SAMPLING, max_turns=2)], max_in_flight=4, seed=7)
    (t,) = cfg.tasks
    make = env_factory(t)
    gateway = Gateway(tokenizer, engine, GatewayConfig(run_id=cfg.run_id))
    async with await TrajectoryStore.open(str(tmp_path / "store.db")) as store:
        scheduler = Scheduler(cfg, store, gateway, {t.name: make}, {t.name: await resolve_instances(t, make)})
        outcome = await scheduler.run()
        assert outcome.status is RunStatus.completed
        stored = await store.trajectories(cfg.run_id, limit=None)
    return {s.trajectory.rollout_id: turns(s.trajectory.token_ids, s.trajectory.loss_mask) for s in stored}


async def test_turns_draw_fresh_tokens_and_a_rerun_reproduces_them(tmp_path: Path, smollm_model: Any,
                                                                   smollm_tokenizer: Any) -> None:
    async with TransformersEngine(TransformersEngineConfig(), smollm_model, smollm_tokenizer) as engine:
        first = await run_two_turn_rollouts(tmp_path / "a", engine, smollm_tokenizer)
        again = await run_two_turn_rollouts(tmp_path / "b", engine, smollm_tokenizer)
    assert len(first) == 4 and all(len(t) == 2 for t in first.values()), first
    for rollout_id, (turn_1, turn_2) in first.items():
        assert turn_1 and turn_2
        assert turn_2 != turn_1, rollout_id  # the old seeding copied turn 1 here
    # no rollout copies another's reply either (each rollout id has its own stream)
    assert len({tuple(t[0]) for t in first.values()}) == len(first)
    assert again == first  # same run seed and rollout ids: the same tokens, turn by turn

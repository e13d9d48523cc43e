"""Demonstrations through the gateway (real tokenizer): a gold episode's tokens are what the chat
template renders, its assistant tokens are the gold actions (mask 1, logprob 0, version -1)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gymfleet.core.records import RolloutStatus
from gymfleet.orchestrator.teacher_forcing import DemonstrationGateway
from gymfleet.orchestrator.protocols import PolicyGateway, PolicySession
from gymfleet.orchestrator.rollout import Rollout, RolloutRequest
from tests.orchestrator.fakes import SlowEchoEnv

pytestmark = pytest.mark.model


def _spans(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each run of 1s."""
    edges = np.diff(np.concatenate([[0], mask.astype(int), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))


async def test_a_gold_episode_is_recorded_token_exact(smollm_tokenizer: Any) -> None:
    gateway = DemonstrationGateway(smollm_tokenizer)
    assert isinstance(gateway, PolicyGateway)
    make = lambda: SlowEchoEnv(n_instances=3, turns=3)  # noqa: E731 - three turns, reward on the last
    gateway.expect("demo-1", make().gold_policy("w002"))
    request = RolloutRequest("r.demos", "g", "demo-1", "gymfleet-test/SlowEcho-v0", "w002", max_turns=5)
    traj = await Rollout(request, make, gateway).run()

    assert (traj.status, traj.reward, traj.metrics["demonstration"]) == (RolloutStatus.ok, 1.0, True)
    template = gateway.template
    # The ids are exactly the template's rendering of the whole conversation (what a policy sees).
    assert traj.token_ids.tolist() == template.encode(template.render(traj.messages))
    spans = _spans(traj.loss_mask)
    assert len(spans) == 3 == sum(m.role == "assistant" for m in traj.messages)
    for start, end in spans:
        ids = traj.token_ids[start:end].tolist()
        assert ids[-1] == smollm_tokenizer.eos_token_id  # the policy learns to stop, too
        assert smollm_tokenizer.decode(ids[:-1]) == "w002"
        assert ids[:-1] == smollm_tokenizer.encode("w002", add_special_tokens=False)
    assert not traj.logprobs.any()
    assert set(traj.versions.tolist()) == {-1}


async def test_a_rollout_without_a_gold_policy_is_a_policy_error(smollm_tokenizer: Any) -> None:
    gateway = DemonstrationGateway(smollm_tokenizer)
    request = RolloutRequest("r.demos", "g", "nobody", "gymfleet-test/SlowEcho-v0", "w000")
    traj = await Rollout(request, lambda: SlowEchoEnv(n_instances=1), gateway).run()
    assert traj.status is RolloutStatus.policy_error and "expect()" in traj.reason


async def test_the_session_is_a_policy_session(smollm_tokenizer: Any) -> None:
    gateway = DemonstrationGateway(smollm_tokenizer)
    gateway.expect("d", SlowEchoEnv(n_instances=1).gold_policy("w000"))
    session = gateway.open_session("d", [])
    assert isinstance(session, PolicySession) and gateway.policy_version == -1

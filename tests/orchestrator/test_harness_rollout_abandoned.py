"""A call whose client went away while the engine sampled: a CLI agent killed mid-call (its client
runs where the policy's commands run) is graded and trained on; an in-process harness's client
gone, or an engine-side loss, drops the sample (infra_error). Fakes: a scripted engine behind the
real HTTP gateway, and a harness env that calls it with the OpenAI SDK."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest

from gymfleet.envs.harness.env import HarnessOutcome
from gymfleet.orchestrator.gateway import Gateway
from gymfleet.orchestrator.harness_rollout import HarnessRollout
from gymfleet.orchestrator.http.server import HttpGateway, HttpGatewayConfig
from gymfleet.orchestrator.http.tree import SessionRegistry
from gymfleet.orchestrator.rollout import RolloutRequest
from tests.orchestrator.http_fakes import ScriptedTextEngine

pytestmark = [pytest.mark.model, pytest.mark.timeout(120)]


class KilledMidCallEnv:
    """A harness env whose agent makes one answered call, then goes away during the next one
    (the engine is made slow; the client gives up), and whose task grades ``reward``.

    Args:
        engine: the scripted engine (made slow for the second call).
        cli_agent: None for an in-process harness; any object for a CLI agent in the sandbox.
        fail: the second call fails on the engine's side instead (502).
    """

    dialect = "openai-chat"

    def __init__(self, engine: ScriptedTextEngine, cli_agent: object | None, fail: bool = False) -> None:
        self.engine, self.cli_agent, self.fail = engine, cli_agent, fail

    async def reset_async(self, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        return "do it", {}

    async def run_harness(self, task: str, base_url: str, timeout_s: float) -> HarnessOutcome:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=0.3)
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": task}])
        self.engine.delay_s, self.engine.fail = (0.0, True) if self.fail else (2.0, False)
        with pytest.raises((openai.APITimeoutError, openai.APIStatusError)):
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": task},
                                                                      {"role": "assistant", "content": "ok"},
                                                                      {"role": "user", "content": "more"}])
        await asyncio.sleep(0.5)  # grading: the gateway has seen the disconnect by then
        return HarnessOutcome(reward=0.0, status="ok", reason="", exit_status="exited 143")

    async def close_async(self) -> None:
        pass


@pytest.mark.parametrize(("cli_agent", "fail", "status"), [
    (object(), False, "ok"),              # the policy killed its own agent mid-call: its 0 is trained on
    (None, False, "infra_error"),         # an in-process harness's client: the host's, not the policy's
    (object(), True, "infra_error"),      # the engine failed: never the policy's doing
], ids=["cli-agent-killed", "in-process-client-gone", "engine-failed"])
async def test_an_abandoned_call_is_the_policys_only_in_its_sandbox(
        smollm_tokenizer: Any, cli_agent: object | None, fail: bool, status: str) -> None:
    engine = ScriptedTextEngine(smollm_tokenizer, ["ok"])
    registry = SessionRegistry(Gateway(smollm_tokenizer, engine))
    env = KilledMidCallEnv(engine, cli_agent, fail)
    request = RolloutRequest("run", "g", "g/0/0", "gymfleet/Harness-v0", "i", rollout_timeout_s=30)
    async with HttpGateway(registry, HttpGatewayConfig()) as server:
        traj = await HarnessRollout(request, lambda: env, registry, server).run()  # type: ignore[arg-type,return-value]
    assert traj.status.value == status and traj.status.trains == (status == "ok"), traj.reason
    assert traj.metrics["calls"] == 2 and traj.reward == 0.0
    assert traj.metrics["abandoned" if not fail else "lost"] == 1
    if status == "ok":
        assert int(traj.loss_mask.sum()) == len(engine.generations[0].token_ids)  # the answered call, trained

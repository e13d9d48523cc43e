"""The HTTP gateway with the official SDKs as clients: three dialects, streaming and not, tool
calls, errors in each dialect's shape, and token-exact session trees (scripted engine, real tokenizer)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import httpx
import openai
import pytest

from gymfleet.orchestrator.gateway import Gateway
from gymfleet.orchestrator.http.server import HttpGateway, HttpGatewayConfig
from gymfleet.orchestrator.http.tree import SessionRegistry
from tests.orchestrator.http_fakes import ScriptedTextEngine

pytestmark = [pytest.mark.model, pytest.mark.timeout(120)]

BASH = {"type": "function", "function": {"name": "bash", "description": "Run a command.",
                                          "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}
CALL_TEXT = 'Listing.\n<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>'


async def serve(tokenizer: Any, texts: list[str], **config: Any) -> tuple[HttpGateway, SessionRegistry, ScriptedTextEngine]:
    engine = ScriptedTextEngine(tokenizer, texts)
    registry = SessionRegistry(Gateway(tokenizer, engine))
    server = await HttpGateway(registry, HttpGatewayConfig(**config)).__aenter__()
    return server, registry, engine


def assert_tree_exact(engine: ScriptedTextEngine, registry_session: Any) -> None:
    """Every later prompt starts with the earlier prompt plus its sampled ids, and the leaf stores them."""
    for before, gen, after in zip(engine.prompts, engine.generations, engine.prompts[1:]):
        assert after[: len(before) + len(gen.token_ids)] == before + gen.token_ids
    traj = registry_session.trajectories("run", "g", "env", "i")[-1]
    ids, mask = traj.token_ids.tolist(), traj.loss_mask.tolist()
    last_prompt, last_gen = engine.prompts[-1], engine.generations[-1]
    assert ids[: len(last_prompt) + len(last_gen.token_ids)] == last_prompt + last_gen.token_ids
    sampled = [t for t, m in zip(ids, mask) if m]
    assert sampled == [t for g in engine.generations for t in g.token_ids]
    assert traj.logprobs[traj.loss_mask == 1].tolist() == pytest.approx([x for g in engine.generations for x in g.logprobs])
    assert set(traj.versions[traj.loss_mask == 1].tolist()) == {3}
    assert set(traj.versions[traj.loss_mask == 0].tolist()) <= {-1}


@pytest.mark.parametrize(("stream", "http"), [(False, "httptools"), (True, "httptools"), (True, "h11")])
async def test_openai_chat_tool_loop_is_token_exact(smollm_tokenizer: Any, stream: bool, http: str) -> None:
    server, registry, engine = await serve(smollm_tokenizer, [CALL_TEXT, "Done: a.txt"], http=http)
    session = registry.open("r1")
    client = openai.AsyncOpenAI(base_url=server.base_url(session), api_key="x", max_retries=0)
    try:
        messages: list[Any] = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "List."}]
        for turn in range(2):
            if stream:
                chunks = [c async for c in await client.chat.completions.create(
                    model="m", messages=messages, tools=[BASH], stream=True)]
                text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
                finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
                tool_calls = [{"id": tc.id, "type": "function", "function": {"name": tc.function.name,
                                                                             "arguments": tc.function.arguments}} for tc in calls]
            else:
                out = await client.chat.completions.create(model="m", messages=messages, tools=[BASH])
                text, finish = out.choices[0].message.content or "", [out.choices[0].finish_reason]
                tool_calls = [tc.model_dump() for tc in out.choices[0].message.tool_calls or []]
            if turn == 0:
                assert text == "Listing." and finish == ["tool_calls"]
                assert [json.loads(c["function"]["arguments"]) for c in tool_calls] == [{"command": "ls"}]
                messages += [{"role": "assistant", "content": text, "tool_calls": tool_calls},
                             {"role": "tool", "tool_call_id": tool_calls[0]["id"], "content": "a.txt"}]
            else:
                assert text == "Done: a.txt" and finish == ["stop"] and not tool_calls
        assert "# Tools" in smollm_tokenizer.decode(engine.prompts[0])
        assert session.metrics() == {"calls": 2, "continued": 1, "branched": 0, "retokenised": 0, "lost": 0, "abandoned": 0, "leaves": 1}
        assert_tree_exact(engine, session)
    finally:
        await server.__aexit__()


@pytest.mark.parametrize("stream", [False, True])
async def test_openai_responses_function_calls(smollm_tokenizer: Any, stream: bool) -> None:
    server, registry, engine = await serve(smollm_tokenizer, [CALL_TEXT, "All done."])
    session = registry.open("r1")
    client = openai.AsyncOpenAI(base_url=server.base_url(session), api_key="x", max_retries=0)
    tool = {"type": "function", "name": "bash", "description": "Run a command.", "parameters": BASH["function"]["parameters"]}
    try:
        items: list[Any] = [{"role": "user", "content": "List."}]
        if stream:
            events = [e async for e in await client.responses.create(model="m", instructions="Be an agent.",
                                                                     input=items, tools=[tool], stream=True)]
            assert events[0].type == "response.created" and events[-1].type == "response.completed"
            assert [e.sequence_number for e in events] == list(range(len(events)))
            first = events[-1].response
        else:
            first = await client.responses.create(model="m", instructions="Be an agent.", input=items, tools=[tool])
        assert first.output_text == "Listing."
        call = next(o for o in first.output if o.type == "function_call")
        assert call.name == "bash" and json.loads(call.arguments) == {"command": "ls"}
        items += [o.model_dump(exclude_none=True) for o in first.output]
        items.append({"type": "function_call_output", "call_id": call.call_id, "output": "a.txt"})
        second = await client.responses.create(model="m", instructions="Be an agent.", input=items, tools=[tool])
        assert second.output_text == "All done."
        assert session.metrics()["continued"] == 1 and session.metrics()["leaves"] == 1
        assert_tree_exact(engine, session)
    finally:
        await server.__aexit__()


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_messages_tool_use(smollm_tokenizer: Any, stream: bool) -> None:
    server, registry, engine = await serve(smollm_tokenizer, [CALL_TEXT, "Finished."])
    session = registry.open("r1")
    client = anthropic.AsyncAnthropic(base_url=server.base_url(session, "anthropic-messages"), api_key="x", max_retries=0)
    tool = {"name": "bash", "description": "Run a command.", "input_schema": BASH["function"]["parameters"]}
    try:
        messages: list[Any] = [{"role": "user", "content": "List."}]
        if stream:
            async with client.messages.stream(model="m", max_tokens=64, system="Agent.", messages=messages,
                                              tools=[tool]) as events:
                first = await events.get_final_message()
        else:
            first = await client.messages.create(model="m", max_tokens=64, system="Agent.", messages=messages, tools=[tool])
        assert first.stop_reason == "tool_use"
        assert [b.type for b in first.content] == ["text", "tool_use"] and first.content[0].text == "Listing."
        assert first.content[1].input == {"command": "ls"}
        messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": first.content[1].id,
                                                   "content": "a.txt"}]}]
        second = await client.messages.create(model="m", max_tokens=64, system="Agent.", messages=messages, tools=[tool])
        assert second.content[0].text == "Finished." and second.stop_reason == "end_turn"
        assert session.metrics()["continued"] == 1
        assert_tree_exact(engine, session)
    finally:
        await server.__aexit__()


async def test_edited_history_branches_and_stays_exact(smollm_tokenizer: Any) -> None:
    server, registry, engine = await serve(smollm_tokenizer, ["one", "two", "three"])
    session = registry.open("r1")
    client = openai.AsyncOpenAI(base_url=server.base_url(session), api_key="x", max_retries=0)
    try:
        history = [{"role": "user", "content": "Go."}]
        await client.chat.completions.create(model="m", messages=history)
        history += [{"role": "assistant", "content": "one"}, {"role": "user", "content": "More."}]
        await client.chat.completions.create(model="m", messages=history)
        # the harness summarises: the history no longer extends any earlier call
        summary = [{"role": "user", "content": "Summary: said one and two."}, {"role": "assistant", "content": "two"},
                   {"role": "user", "content": "Go on."}]
        await client.chat.completions.create(model="m", messages=summary)
        assert session.metrics() == {"calls": 3, "continued": 1, "branched": 1, "retokenised": 1, "lost": 0, "abandoned": 0, "leaves": 2}
        first, second = session.trajectories("run", "g", "env", "i")
        # the last leaf is the rollout's trajectory; the earlier one is its branch, stored and trained with it
        assert (first.rollout_id, first.metrics["branch_of"], second.rollout_id) == ("r1#1", "r1", "r1")
        assert second.branches == [first] and "branch_of" not in second.metrics
        for traj, gens in ((first, engine.generations[:2]), (second, engine.generations[2:])):
            assert traj.token_ids[traj.loss_mask == 1].tolist() == [t for g in gens for t in g.token_ids]
        assert second.token_ids.tolist()[: len(engine.prompts[2])] == engine.prompts[2]
    finally:
        await server.__aexit__()


async def test_errors_in_each_dialect_and_isolation(smollm_tokenizer: Any) -> None:
    server, registry, engine = await serve(smollm_tokenizer, ["hi"], max_body_bytes=4096)
    mine, other = registry.open("r1"), registry.open("r2")
    chat = openai.AsyncOpenAI(base_url=server.base_url(mine), api_key="x", max_retries=0)
    claude = anthropic.AsyncAnthropic(base_url=server.base_url(mine, "anthropic-messages"), api_key="x", max_retries=0)
    try:
        with pytest.raises(openai.BadRequestError) as bad:
            await chat.chat.completions.create(model="m", messages=[{"role": "wizard", "content": "x"}])
        assert bad.value.body["type"] == "invalid_request_error" and "role" in bad.value.body["message"]
        with pytest.raises(anthropic.BadRequestError) as bad_a:
            await claude.messages.create(model="m", max_tokens=-1, messages=[{"role": "user", "content": "x"}])
        assert bad_a.value.body["error"]["type"] == "invalid_request_error"
        with pytest.raises(openai.BadRequestError):
            await chat.responses.create(model="m", input=[{"type": "image_generation_call"}])
        async with httpx.AsyncClient() as raw:
            big = await raw.post(server.base_url(mine) + "/chat/completions", content=b"{" + b" " * 5000 + b"}")
            assert big.status_code == 413 and big.json()["error"]["type"] == "invalid_request_error"
            junk = await raw.post(server.base_url(mine, "anthropic-messages") + "/v1/messages", content=b"not json")
            assert junk.status_code == 400 and junk.json()["type"] == "error"
            forged = server.base_url(mine).replace(mine.token, other.token[:-2] + "xx")
            assert (await raw.post(forged + "/chat/completions", json={"messages": []})).status_code == 404
        assert mine.metrics()["calls"] == other.metrics()["calls"] == 0 and not engine.prompts
        registry.close(mine)
        with pytest.raises(openai.ConflictError):
            await chat.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        with pytest.raises(anthropic.ConflictError):
            await claude.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "x"}])
        registry.forget(mine)
        with pytest.raises(openai.NotFoundError):
            await chat.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        ok = await openai.AsyncOpenAI(base_url=server.base_url(other), api_key="x", max_retries=0).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}])
        assert ok.choices[0].message.content == "hi" and other.metrics()["calls"] == 1
    finally:
        await server.__aexit__()


async def test_lost_calls_are_not_trained_on(smollm_tokenizer: Any) -> None:
    server, registry, engine = await serve(smollm_tokenizer, ["hi"], call_timeout_s=0.5)
    session = registry.open("r1")
    client = openai.AsyncOpenAI(base_url=server.base_url(session), api_key="x", max_retries=0)
    try:
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        engine.delay_s = 5
        with pytest.raises(openai.APIStatusError) as late:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "y"}])
        assert late.value.status_code == 504
        engine.delay_s, dropped = 0, registry.open("r2")
        quitter = openai.AsyncOpenAI(base_url=server.base_url(dropped), api_key="x", max_retries=0, timeout=0.3)
        await quitter.chat.completions.create(model="m", messages=[{"role": "user", "content": "z"}])
        engine.delay_s = 2  # the client goes away while the engine samples (a CLI agent killed mid-call)
        with pytest.raises(openai.APITimeoutError):
            await quitter.chat.completions.create(model="m", messages=[{"role": "user", "content": "z2"}])
        await asyncio.sleep(0.3)
        assert dropped.metrics()["abandoned"] == 1 and dropped.metrics()["lost"] == 0
        assert "disconnected" in dropped.abandoned[0]
        # an in-process harness's client is the host's: its disconnect is infra, never trained on
        host = dropped.trajectories("run", "g", "env", "i")[0]
        assert host.status.value == "infra_error" and "disconnected" in host.reason
        # a CLI agent's client runs where the policy's commands run: the answered call is graded
        sandboxed = dropped.trajectories("run", "g", "env", "i", client_is_policy=True)[0]
        assert sandboxed.status.value == "ok" and sandboxed.status.trains and sandboxed.metrics["abandoned"] == 1
        for client_is_policy in (False, True):  # an engine-side loss stays infra either way
            traj = session.trajectories("run", "g", "env", "i", client_is_policy=client_is_policy)[0]
            assert traj.status.value == "infra_error" and not traj.status.trains
            assert "deadline" in traj.reason and session.metrics()["lost"] == 1
    finally:
        await server.__aexit__()


async def test_unix_socket(smollm_tokenizer: Any, tmp_path: Any) -> None:
    server, registry, _ = await serve(smollm_tokenizer, ["hi"], uds=str(tmp_path / "gw.sock"))
    session = registry.open("r1")
    http_client = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(tmp_path / "gw.sock")))
    client = openai.AsyncOpenAI(base_url=server.base_url(session), api_key="x", http_client=http_client, max_retries=0)
    try:
        out = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        assert out.choices[0].message.content == "hi"
    finally:
        await http_client.aclose()
        await server.__aexit__()


def test_anthropic_messages_takes_a_system_turn_in_the_list() -> None:
    # Claude Code 2.1 sends its environment notes as {"role": "system"} after the first user turn
    from gymfleet.orchestrator.http import anthropic_messages
    from gymfleet.orchestrator.http.errors import BadRequestError

    call = anthropic_messages.parse({"max_tokens": 8, "system": [{"type": "text", "text": "Agent."}], "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Fix it."}]},
        {"role": "system", "content": [{"type": "text", "text": "cwd: /app", "cache_control": {"type": "ephemeral"}}]}]}, 64)
    assert [(m.role, m.content) for m in call.messages] == [("system", "Agent."), ("user", "Fix it."), ("system", "cwd: /app")]
    with pytest.raises(BadRequestError, match="role"):
        anthropic_messages.parse({"max_tokens": 8, "messages": [{"role": "tool", "content": "x"}]}, 64)

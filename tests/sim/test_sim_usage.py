"""Deterministic token usage, simulated prompt caching and ``max_tokens`` cut-offs."""

from __future__ import annotations

import json
from typing import Any

import httpx
from pydantic_core import to_json
from sim_helpers import Clients, anthropic_events, openai_chunks, validate_openai

from raygent.sim import Reply, Rule, Script, ToolCallReply, UsageOverride, serve


def tokens(text: str) -> int:
    return -(-len(text) // 4)


async def _post(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = await http.post(path, json=body)
    assert resp.status_code == 200, resp.text
    data: dict[str, Any] = resp.json()
    return data


async def test_openai_usage_formula_and_determinism(clients: Clients) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be helpful."},
            {"role": "user", "content": [{"type": "text", "text": "abcdefghi"}]},
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c", "content": "result!"},
        ],
        "tools": tools,
    }
    expected_in = (
        4 * 4
        + tokens("Be helpful.")
        + tokens("abcdefghi")
        + tokens("f")
        + tokens("{}")
        + tokens("result!")
        + tokens(to_json(tools).decode())
    )
    reply = "Simulated reply to: abcdefghi"
    async with serve() as sim:
        http = clients.http(sim)
        first = await _post(http, "/v1/chat/completions", body)
        second = await _post(http, "/v1/chat/completions", body)
    assert first["usage"] == second["usage"]
    assert first["usage"]["prompt_tokens"] == expected_in
    assert first["usage"]["completion_tokens"] == tokens(reply)


async def test_anthropic_usage_formula(clients: Clients) -> None:
    body = {
        "model": "c",
        "max_tokens": 100,
        "system": "You are terse.",
        "messages": [
            {"role": "user", "content": "hello"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "w", "input": {"a": 1}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}],
            },
        ],
    }
    expected = 4 * 4 + tokens("You are terse.") + tokens("hello") + tokens("w")
    expected += tokens('{"a":1}') + tokens("ok")
    async with serve() as sim:
        data = await _post(clients.http(sim), "/v1/messages", body)
    assert data["usage"]["input_tokens"] == expected
    assert data["usage"]["cache_read_input_tokens"] == 0


async def test_usage_override(clients: Clients) -> None:
    usage = UsageOverride(input_tokens=1000, output_tokens=7, cached_tokens=600)
    script = Script(rules=[Rule(reply=Reply(text="hi", usage=usage))])
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}
    async with serve(script) as sim:
        http = clients.http(sim)
        oa = (await _post(http, "/v1/chat/completions", body))["usage"]
        an = (await _post(http, "/v1/messages", body))["usage"]
    assert (oa["prompt_tokens"], oa["completion_tokens"]) == (1000, 7)
    assert oa["prompt_tokens_details"]["cached_tokens"] == 600
    assert (an["input_tokens"], an["cache_read_input_tokens"], an["output_tokens"]) == (400, 600, 7)


async def test_openai_prompt_caching(clients: Clients) -> None:
    system = {"role": "system", "content": "s" * 5000}
    turn1 = [system, {"role": "user", "content": "first question"}]
    turn2 = [
        *turn1,
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": "more"},
    ]
    small = [{"role": "user", "content": "tiny"}]
    async with serve() as sim:
        http = clients.http(sim)
        a = (await _post(http, "/v1/chat/completions", {"model": "m", "messages": turn1}))["usage"]
        b = (await _post(http, "/v1/chat/completions", {"model": "m", "messages": turn2}))["usage"]
        other = {"model": "other", "messages": turn2}
        c = (await _post(http, "/v1/chat/completions", other))["usage"]
        for _ in range(2):
            d = await _post(http, "/v1/chat/completions", {"model": "m", "messages": small})
    assert a["prompt_tokens_details"]["cached_tokens"] == 0
    assert b["prompt_tokens_details"]["cached_tokens"] == a["prompt_tokens"]
    assert c["prompt_tokens_details"]["cached_tokens"] == 0  # the cache is per model
    assert d["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # under 1024 tokens


async def test_anthropic_prompt_caching(clients: Clients) -> None:
    system = [{"type": "text", "text": "s" * 400, "cache_control": {"type": "ephemeral"}}]

    def body(*texts: str) -> dict[str, Any]:
        messages = [{"role": "user", "content": t} for t in texts]
        return {"model": "c", "max_tokens": 50, "system": system, "messages": messages}

    async with serve() as sim:
        http = clients.http(sim)
        first = (await _post(http, "/v1/messages", body("hello")))["usage"]
        second = (await _post(http, "/v1/messages", body("world")))["usage"]
        sim.reset()
        third = (await _post(http, "/v1/messages", body("hello")))["usage"]
    cached = 4 + 100
    assert (first["cache_creation_input_tokens"], first["cache_read_input_tokens"]) == (cached, 0)
    assert (second["cache_creation_input_tokens"], second["cache_read_input_tokens"]) == (0, cached)
    assert first["input_tokens"] == second["input_tokens"] == 4 + tokens("hello")
    assert third == first  # reset forgets the cache


async def test_anthropic_cache_lookback_on_moving_breakpoint(clients: Clients) -> None:
    def msg(text: str, cache: bool) -> dict[str, Any]:
        block: dict[str, Any] = {"type": "text", "text": text}
        if cache:
            block["cache_control"] = {"type": "ephemeral"}
        return {"role": "user", "content": [block]}

    turn1 = [msg("a" * 80, True)]
    turn2 = [msg("a" * 80, False), {"role": "assistant", "content": "ok"}, msg("b" * 40, True)]
    async with serve() as sim:
        http = clients.http(sim)
        a = await _post(http, "/v1/messages", {"model": "c", "max_tokens": 9, "messages": turn1})
        b = await _post(http, "/v1/messages", {"model": "c", "max_tokens": 9, "messages": turn2})
    assert a["usage"]["cache_creation_input_tokens"] == 24
    assert b["usage"]["cache_read_input_tokens"] == 24
    assert b["usage"]["cache_creation_input_tokens"] == 4 + 1 + 4 + 10
    assert b["usage"]["input_tokens"] == 0


LONG = "0123456789" * 10
CALL = ToolCallReply("save", {"data": "y" * 60}, id="call_x")


async def test_length_cut_text(clients: Clients) -> None:
    script = Script(rules=[Rule(reply=Reply(text=LONG))])
    oa = {"model": "m", "max_completion_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    an = {"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    async with serve(script) as sim:
        http = clients.http(sim)
        body = validate_openai(await _post(http, "/v1/chat/completions", oa))
        message = await _post(http, "/v1/messages", an)
        streamed = await http.post("/v1/chat/completions", json={**oa, "stream": True})
    assert body.choices[0].finish_reason == "length"
    assert body.choices[0].message.content == LONG[:20]
    assert body.usage is not None and body.usage.completion_tokens == 5
    assert message["stop_reason"] == "max_tokens"
    assert message["content"][0]["text"] == LONG[:20]
    chunks = openai_chunks(streamed.text)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == LONG[:20]
    assert chunks[-1].choices[0].finish_reason == "length"


async def test_length_cut_tool_call_mid_arguments(clients: Clients) -> None:
    script = Script(rules=[Rule(reply=Reply(text="abcd", tool_calls=[CALL, CALL]))])
    full = json.dumps({"data": "y" * 60})
    oa = {"model": "m", "max_tokens": 6, "messages": [{"role": "user", "content": "x"}]}
    an = {"model": "c", "max_tokens": 6, "messages": [{"role": "user", "content": "x"}]}
    async with serve(script) as sim:
        http = clients.http(sim)
        body = await _post(http, "/v1/chat/completions", oa)
        streamed = await http.post("/v1/chat/completions", json={**oa, "stream": True})
        message = await _post(http, "/v1/messages", an)
        events = anthropic_events(
            (await http.post("/v1/messages", json={**an, "stream": True})).text
        )
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    calls = choice["message"]["tool_calls"]
    assert len(calls) == 1 and calls[0]["function"]["arguments"] == full[:20]
    chunks = openai_chunks(streamed.text)
    parts = [
        d.function.arguments or ""
        for c in chunks
        if c.choices
        for d in c.choices[0].delta.tool_calls or []
        if d.function
    ]
    assert "".join(parts) == full[:20]
    assert message["stop_reason"] == "max_tokens"
    assert message["content"][1]["input"] == full[:20]  # not an object: sent verbatim
    partial = "".join(
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    )
    assert partial == full[:20]
    assert events[-2].delta.stop_reason == "max_tokens"


async def test_anthropic_one_hour_cache_writes(clients: Clients) -> None:
    control = {"type": "ephemeral", "ttl": "1h"}
    system = [{"type": "text", "text": "s" * 400, "cache_control": control}]
    body = {
        "model": "c",
        "max_tokens": 5,
        "system": system,
        "messages": [{"role": "user", "content": "x"}],
    }
    async with serve() as sim:
        usage = (await _post(clients.http(sim), "/v1/messages", body))["usage"]
    assert usage["cache_creation_input_tokens"] == 104
    assert usage["cache_creation"] == {
        "ephemeral_5m_input_tokens": 0,
        "ephemeral_1h_input_tokens": 104,
    }

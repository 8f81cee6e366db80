"""Scripts: rule order, ``times``, reply sequences, match conditions, files, defaults."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pydantic
import pytest
from sim_helpers import Clients

from raygent.sim import Match, Reply, Rule, Script, serve


def _oa(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": text}], **extra}


def _an(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 100, "messages": messages, **extra}


async def _oa_text(http: httpx.AsyncClient, body: dict[str, Any]) -> str:
    resp = await http.post("/v1/chat/completions", json=body)
    assert resp.status_code == 200, resp.text
    return str(resp.json()["choices"][0]["message"]["content"])


async def _an_text(http: httpx.AsyncClient, body: dict[str, Any]) -> str:
    resp = await http.post("/v1/messages", json=body)
    assert resp.status_code == 200, resp.text
    return str(resp.json()["content"][0]["text"])


async def test_first_match_times_and_sequences(clients: Clients) -> None:
    script = Script(
        rules=[
            Rule(match=Match(last_user="^once"), reply=Reply(text="first"), times=1),
            Rule(match=Match(last_user="^once"), reply=[Reply(text="a"), Reply(text="b")]),
            Rule(reply=Reply(text="fallback")),
        ]
    )
    async with serve(script) as sim:
        http = clients.http(sim)
        got = [await _oa_text(http, _oa("once more")) for _ in range(4)]
        assert got == ["first", "a", "b", "a"]
        assert await _oa_text(http, _oa("other")) == "fallback"
        sim.reset()
        assert await _oa_text(http, _oa("once")) == "first"


async def test_sequence_with_times_is_consumed(clients: Clients) -> None:
    script = Script(rules=[Rule(reply=[Reply(text="1"), Reply(text="2")], times=2)])
    async with serve(script) as sim:
        http = clients.http(sim)
        got = [await _oa_text(http, _oa("x")) for _ in range(3)]
    assert got == ["1", "2", "Simulated reply to: x"]


async def test_match_conditions(clients: Clients) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    script = Script(
        rules=[
            Rule(match=Match(api="anthropic"), reply=Reply(text="anthropic")),
            Rule(match=Match(model="^mini"), reply=Reply(text="mini")),
            Rule(match=Match(has_tools=True), reply=Reply(text="tools")),
            Rule(match=Match(stream=True), reply=Reply(text="stream")),
            Rule(match=Match(system="pirate"), reply=Reply(text="arr")),
            Rule(match=Match(after_tool_result=True), reply=Reply(text="after tool")),
        ]
    )
    tool_turn = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    async with serve(script) as sim:
        http = clients.http(sim)
        assert await _an_text(http, _an([{"role": "user", "content": "hi"}])) == "anthropic"
        assert await _oa_text(http, {**_oa("hi"), "model": "mini-1"}) == "mini"
        assert await _oa_text(http, _oa("hi", tools=tools)) == "tools"
        system = [
            {"role": "system", "content": "Talk like a pirate."},
            {"role": "user", "content": "hi"},
        ]
        assert await _oa_text(http, {"model": "m", "messages": system}) == "arr"
        assert await _oa_text(http, {"model": "m", "messages": tool_turn}) == "after tool"
        streamed = await http.post("/v1/chat/completions", json=_oa("hi", stream=True))
        assert '"content":"stream"' in streamed.text


async def test_anthropic_last_user_skips_tool_results(clients: Clients) -> None:
    script = Script(
        rules=[
            Rule(
                match=Match(last_user="weather", after_tool_result=True), reply=Reply(text="sunny")
            ),
            Rule(match=Match(system="^Be brief"), reply=Reply(text="brief")),
        ]
    )
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "weather in Paris?"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "w", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "20C"}],
        },
    ]
    async with serve(script) as sim:
        http = clients.http(sim)
        assert await _an_text(http, _an(messages)) == "sunny"
        system = [{"type": "text", "text": "Be brief."}]
        body = _an([{"role": "user", "content": "hi"}], system=system)
        assert await _an_text(http, body) == "brief"


async def test_default_reply_echoes_last_user_text(clients: Clients) -> None:
    text = "x" * 100
    async with serve() as sim:
        http = clients.http(sim)
        got = await _oa_text(http, _oa(text))
        assert got == "Simulated reply to: " + "x" * 60
        assert await _an_text(http, _an([{"role": "user", "content": "yo"}])) == (
            "Simulated reply to: yo"
        )


async def test_script_default_reply(clients: Clients) -> None:
    async with serve({"rules": [], "default": "always this"}) as sim:
        assert await _oa_text(clients.http(sim), _oa("hi")) == "always this"


SCRIPT_DATA = [
    {"match": {"last_user": "hello"}, "reply": {"text": "hi from file"}},
    {
        "match": {"api": "openai"},
        "reply": {"tool_calls": [{"name": "f", "arguments": {"x": 1}}]},
        "times": 1,
    },
    {"reply": "plain"},
]


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
async def test_script_files(clients: Clients, tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"script{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps({"rules": SCRIPT_DATA}))
    else:
        import yaml

        path.write_text(yaml.safe_dump({"rules": SCRIPT_DATA}))
    assert Script.from_file(path) == Script.model_validate(SCRIPT_DATA)
    for source in (path, str(path)):
        async with serve(source) as sim:
            http = clients.http(sim)
            assert await _oa_text(http, _oa("hello")) == "hi from file"
            resp = await http.post("/v1/chat/completions", json=_oa("x"))
            call = resp.json()["choices"][0]["message"]["tool_calls"][0]
            assert call["function"] == {"name": "f", "arguments": '{"x": 1}'}
            assert await _oa_text(http, _oa("x")) == "plain"


def test_invalid_scripts_are_rejected() -> None:
    with pytest.raises(pydantic.ValidationError):
        Script.model_validate([{"match": {"last_user": "("}, "reply": "x"}])
    with pytest.raises(pydantic.ValidationError):
        Script.model_validate([{"reply": []}])
    with pytest.raises(pydantic.ValidationError):
        Script.model_validate([{"match": {"colour": "red"}, "reply": "x"}])


def test_public_exports() -> None:
    import raygent.sim

    assert set(raygent.sim.__all__) == {
        "AWS_TEST_CREDENTIALS",
        "AWS_TEST_SESSION_CREDENTIALS",
        "AwsTestCredentials",
        "BatchTimes",
        "Fault",
        "Latency",
        "Match",
        "RecordedRequest",
        "Reply",
        "Rule",
        "Script",
        "ServerToolReply",
        "ServiceTiers",
        "SimRateLimits",
        "SimStats",
        "Simulator",
        "ToolCallReply",
        "UsageOverride",
        "serve",
    }


async def test_json_reply(clients: Clients) -> None:
    script = Script(rules=[Rule(reply=Reply(json={"answer": 42, "ok": True}))])
    async with serve(script) as sim:
        text = await _oa_text(clients.http(sim), _oa("x"))
    assert json.loads(text) == {"answer": 42, "ok": True}

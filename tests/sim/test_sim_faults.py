"""Each fault kind, by rule and by rate."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import httpx
import openai
import pytest
from pydantic_core import from_json
from sim_helpers import USER, Clients, anthropic_events, openai_chunks, wait_for

from raygent.sim import Fault, Match, Reply, Rule, Script, ToolCallReply, serve

TEXT = "All the world's a stage, and all the men and women merely players. " * 2


def _script(fault: Fault, **reply: Any) -> Script:
    return Script(rules=[Rule(reply=Reply(text=TEXT, fault=fault, **reply))])


def _body(stream: bool = False) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 500, "messages": USER, "stream": stream}


async def test_truncated_streams_stop_early(clients: Clients) -> None:
    async with serve(_script(Fault(kind="truncate", after_chunks=3))) as sim:
        oa = clients.openai(sim)
        with pytest.raises(openai.APIConnectionError):
            stream = await oa.chat.completions.create(model="m", messages=USER, stream=True)
            async for _ in stream:
                pass
        http = clients.http(sim)
        for path in ("/v1/chat/completions", "/v1/messages"):
            received = b""
            with pytest.raises(httpx.RemoteProtocolError):
                async with http.stream("POST", path, json=_body(stream=True)) as resp:
                    async for chunk in resp.aiter_raw():
                        received += chunk
            # Chunks are SSE events; Anthropic's ping counts as one.
            assert len([e for e in received.split(b"\n\n") if e]) == 3
        # A client sees the cut before the server has counted the response it cut.
        stats = await sim.wait_until(lambda s: sum(s.by_status.values()) >= 3)
    assert stats.by_status == {200: 3} and stats.disconnects == 0 and stats.faults == 3


async def test_truncated_body(clients: Clients) -> None:
    async with serve(_script(Fault(kind="truncate"))) as sim:
        with pytest.raises(openai.APIConnectionError):
            await clients.openai(sim).chat.completions.create(model="m", messages=USER)
        with pytest.raises(anthropic.APIConnectionError):
            await clients.anthropic(sim).messages.create(model="c", max_tokens=50, messages=USER)


async def test_hang_until_client_gives_up(clients: Clients) -> None:
    async with serve(_script(Fault(kind="hang"))) as sim:
        oa = clients.openai(sim, timeout=0.2)
        with pytest.raises(openai.APITimeoutError):
            await oa.chat.completions.create(model="m", messages=USER)
        stats = await wait_for(sim, lambda s: s.disconnects == 1)
    assert stats.by_status == {} and stats.in_flight == 0


async def test_stream_hang_after_chunks(clients: Clients) -> None:
    async with serve(_script(Fault(kind="hang", after_chunks=2))) as sim:
        http = clients.http(sim)
        async with http.stream("POST", "/v1/chat/completions", json=_body(True)) as resp:
            lines = resp.aiter_lines()
            seen: list[str] = []
            with pytest.raises(asyncio.TimeoutError):
                while True:
                    line = await asyncio.wait_for(anext(lines), 0.3)
                    if line:
                        seen.append(line)
        stats = await wait_for(sim, lambda s: s.disconnects == 1)
    assert len(seen) == 2 and '"role":"assistant"' in seen[0] and stats.streams == 1


async def test_malformed_tool_args(clients: Clients) -> None:
    call = ToolCallReply("f", {"a": 1})
    script = Script(
        rules=[Rule(reply=Reply(tool_calls=[call], fault=Fault(kind="malformed_tool_args")))]
    )
    async with serve(script) as sim:
        http = clients.http(sim)
        body = (await http.post("/v1/chat/completions", json=_body())).json()
        args = body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
        raw = (await http.post("/v1/messages", json=_body(True))).text
    assert args == '{"a": 1,}'
    with pytest.raises(json.JSONDecodeError):
        json.loads(args)
    partial = "".join(
        e.delta.partial_json
        for e in anthropic_events(raw)
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    )
    with pytest.raises(ValueError):
        from_json(partial, allow_partial=True)


async def test_scripted_malformed_arguments_sent_verbatim(clients: Clients) -> None:
    script = Script(rules=[Rule(reply=Reply(tool_calls=[ToolCallReply("f", '{"a": ')]))])
    async with serve(script) as sim:
        http = clients.http(sim)
        body = (await http.post("/v1/chat/completions", json=_body(True))).text
    parts = [
        d.function.arguments or ""
        for c in openai_chunks(body)
        if c.choices
        for d in c.choices[0].delta.tool_calls or []
        if d.function
    ]
    assert "".join(parts) == '{"a": '


async def test_not_json(clients: Clients) -> None:
    async with serve(_script(Fault(kind="not_json"))) as sim:
        resp = await clients.http(sim).post("/v1/chat/completions", json=_body())
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/html")
    with pytest.raises(json.JSONDecodeError):
        json.loads(resp.text)


async def test_empty_choices(clients: Clients) -> None:
    async with serve(_script(Fault(kind="empty_choices"))) as sim:
        completion = await clients.openai(sim).chat.completions.create(model="m", messages=USER)
        message = await clients.anthropic(sim).messages.create(
            model="c", max_tokens=5, messages=USER
        )
        raw = (await clients.http(sim).post("/v1/chat/completions", json=_body(True))).text
    assert completion.choices == []
    assert message.content == []
    assert all(c.choices == [] for c in openai_chunks(raw))


async def test_context_exceeded_and_refusal_faults(clients: Clients) -> None:
    script = Script(
        rules=[
            Rule(match=Match(last_user="ctx"), reply=Reply(fault=Fault(kind="context_exceeded"))),
            Rule(reply=Reply(text="hi", fault=Fault(kind="refusal", message="No."))),
        ]
    )
    ctx = [{"role": "user", "content": "ctx"}]
    async with serve(script) as sim:
        oa, an = clients.openai(sim), clients.anthropic(sim)
        with pytest.raises(openai.BadRequestError) as o_err:
            await oa.chat.completions.create(model="m", messages=ctx)
        with pytest.raises(anthropic.BadRequestError) as a_err:
            await an.messages.create(model="c", max_tokens=5, messages=ctx)
        refused = await oa.chat.completions.create(model="m", messages=USER)
        refused_an = await an.messages.create(model="c", max_tokens=5, messages=USER)
    assert o_err.value.code == "context_length_exceeded"
    assert "prompt is too long" in str(a_err.value)
    assert refused.choices[0].message.refusal == "No."
    assert refused.choices[0].message.content is None
    assert refused_an.stop_reason == "refusal"


async def test_fault_rate_is_seeded(clients: Clients) -> None:
    kinds = ("status", Fault(kind="status", status=503), "empty_choices")

    async def run(seed: int) -> list[tuple[int, int]]:
        async with serve(fault_rate=0.5, fault_kinds=kinds, seed=seed) as sim:
            http = clients.http(sim)
            out = []
            for _ in range(24):
                resp = await http.post("/v1/chat/completions", json=_body())
                choices = len(resp.json().get("choices", [])) if resp.status_code == 200 else -1
                out.append((resp.status_code, choices))
            assert sim.stats().faults == sum(1 for s, c in out if s != 200 or c == 0)
            return out

    first, again, other = await run(8), await run(8), await run(9)
    assert first == again != other
    assert {s for s, _ in first} == {200, 500, 503}


async def test_stream_error_event_after_chunks(clients: Clients) -> None:
    async with serve(_script(Fault(kind="stream_error", after_chunks=2, status=529))) as sim:
        with pytest.raises(anthropic.APIError, match="Overloaded"):
            stream = await clients.anthropic(sim).messages.create(
                model="c", max_tokens=50, messages=USER, stream=True
            )
            async for _ in stream:
                pass
        with pytest.raises(openai.APIError):
            chunks = await clients.openai(sim).chat.completions.create(
                model="m", messages=USER, stream=True
            )
            async for _ in chunks:
                pass
        async with clients.http(sim).stream(
            "POST", "/v1/messages", json=_body(stream=True)
        ) as resp:
            events = [e for e in (await resp.aread()).split(b"\n\n") if e]
        unstreamed = await clients.http(sim).post("/v1/messages", json=_body())
    assert resp.status_code == 200 and len(events) == 3
    assert events[-1].startswith(b"event: error\ndata: ")
    assert from_json(events[-1].split(b"data: ", 1)[1])["error"]["type"] == "overloaded_error"
    assert unstreamed.status_code == 529  # not streamed: the same error as a status


async def test_scripted_error_body_and_headers_are_sent_verbatim(clients: Clients) -> None:
    body = {"error": {"message": "echo", "code": "c-1", "extra": [1]}}
    faults = [
        Fault(kind="status", status=403, body=body, headers={"x-request-id": "rid-1"}),
        Fault(kind="status", status=502, body="<html>gateway</html>"),
        Fault(kind="stream_error", body="{broken", headers={"x-request-id": "rid-2"}),
    ]
    rules = [Rule(match=Match(stream=i == 2), reply=Reply(fault=f)) for i, f in enumerate(faults)]
    async with serve(Script(rules=rules[:2])) as sim:
        http = clients.http(sim)
        first = await http.post("/v1/chat/completions", json=_body())
    async with serve(Script(rules=rules[1:])) as sim:
        http = clients.http(sim)
        second = await http.post("/v1/chat/completions", json=_body())
        async with http.stream("POST", "/v1/chat/completions", json=_body(stream=True)) as resp:
            streamed = await resp.aread()
    assert first.status_code == 403 and first.json() == body
    assert first.headers["x-request-id"] == "rid-1"
    assert second.status_code == 502 and second.text == "<html>gateway</html>"
    assert resp.headers["x-request-id"] == "rid-2"
    assert streamed.endswith(b"data: {broken\n\n")

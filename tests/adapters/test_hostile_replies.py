"""Hostile or broken provider replies, served over real HTTP: a typed error, never a crash.

The simulator only says what providers say; these bodies are what a broken proxy or a
buggy compatible server might say, so a bare aiohttp server serves them verbatim.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from adapter_support import make_model
from aiohttp import web

from raygent import ModelOptions, ToolSpec, UserMessage
from raygent.errors import ProviderError, ProviderResponseError
from raygent.models import Done, ReasoningDelta, ReasoningOptions, TextDelta, ToolCallDelta
from raygent.models._bedrock_stream import EventStreamDecoder
from raygent.sim import Reply, Rule, ServerToolReply, ToolCallReply, serve
from raygent.sim import _bedrock_frames as frames

HELLO = [UserMessage(content="hello")]

OK_OPENAI = {
    "id": "x",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
}
OK_RESPONSES = {
    "id": "resp_x",
    "object": "response",
    "status": "completed",
    "model": "m",
    "output": [
        {
            "type": "message",
            "id": "msg_x",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "hi", "annotations": []}],
        }
    ],
}
OK_BEDROCK = {
    "output": {"message": {"role": "assistant", "content": [{"text": "hi"}]}},
    "stopReason": "end_turn",
    "usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
    "metrics": {"latencyMs": 1},
}
OK_GEMINI = {
    "candidates": [
        {"content": {"role": "model", "parts": [{"text": "hi"}]}, "finishReason": "STOP"}
    ],
    "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1},
    "modelVersion": "m",
    "responseId": "r",
}
OK = {
    "openai": OK_OPENAI,
    "openai_responses": OK_RESPONSES,
    "bedrock": OK_BEDROCK,
    "gemini": OK_GEMINI,
}
OK_ANTHROPIC = {
    "id": "msg_x",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "hi"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


class RawServer:
    """Answers every POST with the bytes it was last given."""

    def __init__(self) -> None:
        self.status = 200
        self.body = b""
        self.content_type = "application/json"

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=self.status, body=self.body, content_type=self.content_type)

    def reply(self, body: Any, status: int = 200, content_type: str = "application/json") -> None:
        self.body = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.status, self.content_type = status, content_type


class _Urls:
    def __init__(self, url: str) -> None:
        self.openai_base_url = url + "/v1"
        self.anthropic_base_url = url
        self.url = url  # Bedrock's endpoint
        self.gemini_base_url = url


@pytest.fixture
async def raw() -> AsyncIterator[tuple[RawServer, _Urls]]:
    server = RawServer()
    app = web.Application()
    app.router.add_post("/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield server, _Urls(f"http://127.0.0.1:{port}")
    await runner.cleanup()


def with_extra_fields(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "surprise": {"nested": [1, 2]}, "system_fingerprint": None}


async def test_unknown_fields_are_ignored(raw: Any, provider: str) -> None:
    server, urls = raw
    server.reply(with_extra_fields(OK.get(provider, OK_ANTHROPIC)))
    reply = await make_model(provider, urls).complete(HELLO)
    assert reply.text == "hi" and reply.finish_reason == "stop"


@pytest.mark.parametrize(
    "body",
    [
        b"<html>502 Bad Gateway</html>",
        b"",
        b"[1, 2, 3]",
        b'{"choices": "nope", "content": "nope"}',
        b'{"choices": [{"message": null}], "content": [{"type": "text"}]}',
        b'{"id": "only"}',
        b'{"choices": [{"message": {"tool_calls": [{"id": 1}]}}], '
        b'"content": [{"type": "tool_use"}]}',
        b"\xff\xfe\x00garbage",
    ],
    ids=["html", "empty", "array", "wrong-types", "null-message", "missing", "bad-call", "bytes"],
)
async def test_malformed_bodies_are_typed_errors(raw: Any, provider: str, body: bytes) -> None:
    server, urls = raw
    server.reply(body, content_type="text/plain")
    with pytest.raises(ProviderResponseError) as info:
        await make_model(provider, urls).complete(HELLO)
    assert info.value.retryable


async def test_error_status_with_a_non_json_body(raw: Any, provider: str) -> None:
    server, urls = raw
    server.reply(b"upstream connect error", status=502, content_type="text/plain")
    with pytest.raises(ProviderError) as info:
        await make_model(provider, urls).complete(HELLO)
    assert info.value.status == 502 and info.value.retryable
    assert "upstream connect error" in str(info.value)


STREAMS = {
    "openai": {
        "no-done": b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n',
        "garbage": b"data: {not json\n\n",
        "error-event": b'data: {"error": {"message": "overloaded"}}\n\n',
    },
    "openai_responses": {
        "no-done": b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
        b'"delta":"hi","output_index":0,"content_index":0,"item_id":"m","sequence_number":0}\n\n',
        "garbage": b"event: response.created\ndata: {not json\n\n",
        "error-event": b'event: error\ndata: {"type":"error","code":"server_error",'
        b'"message":"overloaded","sequence_number":1}\n\n',
    },
    "anthropic": {
        "no-done": b'event: message_start\ndata: {"type":"message_start","message":'
        b'{"id":"m","model":"x","usage":{"input_tokens":1}}}\n\n',
        "garbage": b"event: message_start\ndata: {not json\n\n",
        "error-event": b'event: error\ndata: {"type":"error","error":'
        b'{"type":"overloaded_error","message":"Overloaded"}}\n\n',
    },
    # Bedrock's binary event stream: a frame whose CRC is wrong is its garbage.
    "bedrock": {
        "no-done": frames.event("messageStart", {"role": "assistant"})
        + frames.event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "hi"}}),
        "garbage": frames.event("messageStart", {"role": "assistant"})[:-1] + b"\x00",
        "error-event": frames.exception("modelStreamErrorException", {"message": "Overloaded"}),
    },
    "gemini": {
        "no-done": b'data: {"candidates":[{"content":{"role":"model","parts":[{"text":"hi"}]}}]}'
        b"\r\n\r\n",
        "garbage": b"data: {not json\r\n\r\n",
        "error-event": b'data: {"error": {"code": 503, "message": "The model is overloaded.",'
        b' "status": "UNAVAILABLE"}}\r\n\r\n',
    },
}


@pytest.mark.parametrize("case", ["no-done", "garbage", "error-event"])
async def test_broken_streams_are_typed_errors(raw: Any, provider: str, case: str) -> None:
    server, urls = raw
    server.reply(STREAMS[provider][case], content_type="text/event-stream")
    seen: list[Any] = []
    with pytest.raises(ProviderError) as info:
        async for chunk in make_model(provider, urls).stream(HELLO):
            seen.append(chunk)
    assert info.value.retryable
    assert not any(isinstance(c, Done) for c in seen)


async def test_a_huge_reply_is_read_whole(raw: Any, provider: str) -> None:
    server, urls = raw
    text = "x" * 2_000_000
    if provider == "openai":
        body = {**OK_OPENAI, "choices": [{**OK_OPENAI["choices"][0], "message": {"content": text}}]}
    elif provider == "openai_responses":
        part = {"type": "output_text", "text": text, "annotations": []}
        body = {**OK_RESPONSES, "output": [{**OK_RESPONSES["output"][0], "content": [part]}]}
    elif provider == "bedrock":
        message = {"role": "assistant", "content": [{"text": text}]}
        body = {**OK_BEDROCK, "output": {"message": message}}
    elif provider == "gemini":
        content = {"role": "model", "parts": [{"text": text}]}
        body = {**OK_GEMINI, "candidates": [{"content": content, "finishReason": "STOP"}]}
    else:
        body = {**OK_ANTHROPIC, "content": [{"type": "text", "text": text}]}
    server.reply(body)
    reply = await make_model(provider, urls).complete(HELLO)
    assert len(reply.text) == 2_000_000


async def test_a_responses_stream_without_event_lines_is_read(raw: Any) -> None:
    """Event names are optional in SSE: a compatible server that sends data lines only
    gets every event parsed (none skipped by name)."""
    server, urls = raw
    delta = {"type": "response.output_text.delta", "delta": "hi", "output_index": 0}
    done = {"type": "response.completed", "response": OK_RESPONSES}
    created = {"type": "response.created", "response": {**OK_RESPONSES, "output": []}}
    events = [created, delta, done]
    server.reply(
        b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events),
        content_type="text/event-stream",
    )
    chunks = [c async for c in make_model("openai_responses", urls).stream(HELLO)]
    assert [c.type for c in chunks] == ["text", "usage", "done"]
    assert isinstance(chunks[-1], Done) and chunks[-1].response.text == "hi"


# -- every field of a rich reply, replaced by a value of the wrong shape -------------------

HOSTILE: list[Any] = [None, 12345, -1, 1.5, True, "text", [], {}, [{}], {"type": "text"}]


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON value (the value itself included)."""
    out = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            out.extend(_paths(item, (*path, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.extend(_paths(item, (*path, index)))
    return out


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replaced(value[head], rest, new)}
    items = list(value)
    items[head] = _replaced(items[head], rest, new)
    return items


def _sse(events: list[tuple[str | None, Any]]) -> bytes:
    out = b""
    for name, data in events:
        head = b"event: " + name.encode() + b"\n" if name else b""
        body = data if isinstance(data, str) else json.dumps(data)
        out += head + b"data: " + body.encode() + b"\n\n"
    return out


def _parse_sse(raw: str) -> list[tuple[str | None, Any]]:
    events: list[tuple[str | None, Any]] = []
    for block in raw.replace("\r\n", "\n").strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        data = lines["data"]
        events.append((lines.get("event"), data if data == "[DONE]" else json.loads(data)))
    return events


RICH = [
    Rule(
        reply=Reply(
            thinking="Hmm.",
            server_tools=[
                ServerToolReply("web_search", {"query": "q"}),
                ServerToolReply("lookup", {"id": 7}, server_name="docs"),
            ],
            text="It is sunny.",
            citations=[
                {
                    "type": "web_search_result_location",
                    "cited_text": "Sunny.",
                    "url": "https://example.com/",
                    "title": "Example",
                    "encrypted_index": "ZW5j",
                }
            ],
            tool_calls=[ToolCallReply("get_weather", {"city": "Paris"})],
            list_content=True,
        )
    )
]
_PATHS = {"openai": "/v1/chat/completions", "openai_responses": "/v1/responses"}


def _frames(events: list[tuple[str | None, Any]]) -> bytes:
    """Bedrock's events, framed as ConverseStream sends them."""
    head = {":content-type": "application/json", ":message-type": "event"}
    return b"".join(
        frames.frame({":event-type": str(name), **head}, json.dumps(data).encode())
        for name, data in events
    )


async def _bedrock_sample(stream: bool) -> Any:
    """What the simulator answers a rich Converse request with, signed as Bedrock wants."""
    async with serve(RICH) as sim:
        model: Any = make_model("bedrock", sim)
        options = ModelOptions(
            tools=(ToolSpec(name="get_weather"),), reasoning=ReasoningOptions(effort="low")
        )
        content = json.dumps(model.request_body(HELLO, options, stream=stream)).encode()
        url = sim.url + model.request_path(stream=stream)
        headers = model._signer.sign("POST", url, {"content-type": "application/json"}, content)
        async with httpx.AsyncClient() as http:
            resp = await http.post(url, content=content, headers=headers)
    if not stream:
        return resp.json()
    return [(e.kind, json.loads(e.payload)) for e in EventStreamDecoder().feed(resp.content)]


async def _sample(provider: str, stream: bool) -> Any:
    """What the simulator answers a rich reply with: the body, or the SSE events."""
    if provider == "bedrock":
        return await _bedrock_sample(stream)
    async with serve(RICH) as sim:
        model = make_model(provider, sim, api_key="sk-test")
        options = ModelOptions(
            tools=(ToolSpec(name="get_weather"),), reasoning=ReasoningOptions(effort="low")
        )
        body = model.request_body(HELLO, options, stream=stream)  # type: ignore[attr-defined]
        path = _PATHS.get(provider, "/v1/messages")
        if provider == "gemini":
            path = model.request_path(stream=stream)  # type: ignore[attr-defined]
        async with httpx.AsyncClient(base_url=sim.url) as http:
            resp = await http.post(path, json=body)
    return _parse_sse(resp.text) if stream else resp.json()


async def _only_typed(model: Any, stream: bool) -> None:
    """The reply is read, or fails with ProviderResponseError; nothing else."""
    try:
        if stream:
            async for chunk in model.stream(HELLO):
                if isinstance(chunk, (TextDelta, ReasoningDelta)):
                    assert isinstance(chunk.text, str)
                elif isinstance(chunk, ToolCallDelta):
                    assert isinstance(chunk.call_id, str) and isinstance(chunk.name, str)
                    assert isinstance(chunk.arguments_delta, str)
        else:
            await model.complete(HELLO)
    except ProviderResponseError:
        pass


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_no_field_of_a_reply_raises_anything_untyped(
    raw: Any, provider: str, stream: bool
) -> None:
    """Each field of a rich reply (thinking, server tools, citations, list content, tool
    calls, usage) replaced by each of a set of wrong-shaped values: the adapter reads the
    reply or raises ProviderResponseError; no TypeError, KeyError or ValidationError."""
    server, urls = raw
    sample = await _sample(provider, stream)
    model = make_model(provider, urls)
    tried = 0
    if not stream:
        for path in _paths(sample)[1:]:
            for value in HOSTILE:
                server.reply(_replaced(sample, path, value))
                await _only_typed(model, stream)
                tried += 1
    else:
        for index, (name, data) in enumerate(sample):
            if data == "[DONE]":
                continue
            for path in _paths(data):
                for value in HOSTILE:
                    events = list(sample)
                    events[index] = (name, _replaced(data, path, value))
                    if provider == "bedrock":
                        server.reply(_frames(events), content_type=frames.CONTENT_TYPE)
                    else:
                        server.reply(_sse(events), content_type="text/event-stream")
                    await _only_typed(model, stream)
                    tried += 1
    assert tried > 100

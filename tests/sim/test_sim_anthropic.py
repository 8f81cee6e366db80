"""The official anthropic SDK against the simulator, and strict checks of the raw wire."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import anthropic
import jsonschema
import pytest
from pydantic import BaseModel
from sim_helpers import USER, Clients, anthropic_events, validate_anthropic

from raygent.sim import Fault, Match, Reply, Rule, Script, ToolCallReply, serve

SCRIPT = Script(
    rules=[
        Rule(
            match=Match(last_user="weather"),
            reply=Reply(
                text="Checking.",
                tool_calls=[ToolCallReply("get_weather", {"city": "Paris", "days": [1, 2]})],
            ),
        ),
        Rule(
            match=Match(last_user="think"),
            reply=Reply(thinking="Let me think this through step by step.", text="42"),
        ),
        Rule(match=Match(last_user="hidden"), reply=Reply(redacted_thinking="EncryptedBlob==")),
        Rule(match=Match(last_user="secret"), reply=Reply(refusal="I can't share that.")),
        Rule(match=Match(last_user="pause"), reply=Reply(text="...", finish="pause_turn")),
    ]
)
TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather for a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


def _body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 1000, "messages": [_user(text)], **extra}


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


async def test_complete_default_reply(clients: Clients) -> None:
    async with serve() as sim:
        client = clients.anthropic(sim)
        message = await client.messages.create(model="claude-x", max_tokens=100, messages=USER)
    assert message.content[0].type == "text"
    assert message.content[0].text == "Simulated reply to: Hello there, simulator!"
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0


async def test_raw_bodies_and_streams_are_strictly_valid(clients: Clients) -> None:
    async with serve(SCRIPT) as sim:
        http = clients.http(sim)
        for text in ("hi", "weather", "think", "hidden", "secret", "pause"):
            resp = await http.post("/v1/messages", json=_body(text))
            assert resp.status_code == 200
            assert resp.headers["request-id"].startswith("req_")
            validate_anthropic(resp.json())
            streamed = await http.post("/v1/messages", json=_body(text, stream=True))
            events = anthropic_events(streamed.text)
            kinds = [e.type for e in events]
            assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]


async def test_stream_helper_final_message(clients: Clients) -> None:
    long_text = "Streaming text in several chunks, please. " * 3
    script = Script(rules=[Rule(reply=Reply(text=long_text))])
    async with serve(script) as sim:
        client = clients.anthropic(sim)
        async with client.messages.stream(
            model="claude-x",
            max_tokens=500,
            messages=USER,
        ) as stream:
            deltas = [text async for text in stream.text_stream]
            final = await stream.get_final_message()
    assert len(deltas) > 3
    assert final.content[0].text == long_text
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == -(-len(long_text) // 4)


async def test_tool_use(clients: Clients) -> None:
    async with serve(SCRIPT) as sim:
        client = clients.anthropic(sim)
        message = await client.messages.create(
            model="claude-x",
            max_tokens=100,
            messages=[_user("weather?")],
            tools=TOOLS,
        )
        async with client.messages.stream(
            model="claude-x",
            max_tokens=100,
            messages=[_user("weather?")],
            tools=TOOLS,
        ) as stream:
            streamed = await stream.get_final_message()
    for result in (message, streamed):
        assert result.stop_reason == "tool_use"
        text, call = result.content
        assert text.type == "text" and text.text == "Checking."
        assert call.type == "tool_use"
        assert (call.id, call.name, call.input) == (
            "toolu_1",
            "get_weather",
            {"city": "Paris", "days": [1, 2]},
        )


async def test_thinking_with_signature(clients: Clients) -> None:
    thinking = "Let me think this through step by step."
    expected = base64.b64encode(hashlib.sha256(b"raygent-sim:" + thinking.encode()).digest())
    async with serve(SCRIPT) as sim:
        client = clients.anthropic(sim)
        message = await client.messages.create(
            model="claude-x", max_tokens=2000, messages=[_user("think")]
        )
        async with client.messages.stream(
            model="claude-x", max_tokens=2000, messages=[_user("think")]
        ) as stream:
            streamed = await stream.get_final_message()
    for result in (message, streamed):
        block, text = result.content
        assert block.type == "thinking"
        assert block.thinking == thinking
        assert block.signature == expected.decode()
        assert text.type == "text" and text.text == "42"
        assert result.usage.output_tokens == -(-len(thinking) // 4) + 1


async def test_redacted_thinking_refusal_and_pause(clients: Clients) -> None:
    async with serve(SCRIPT) as sim:
        client = clients.anthropic(sim)
        hidden = await client.messages.create(model="c", max_tokens=50, messages=[_user("hidden")])
        refused = await client.messages.create(model="c", max_tokens=50, messages=[_user("secret")])
        paused = await client.messages.create(model="c", max_tokens=50, messages=[_user("pause")])
    assert hidden.content[0].type == "redacted_thinking"
    assert hidden.content[0].data == "EncryptedBlob=="
    assert refused.stop_reason == "refusal"
    assert refused.content[0].text == "I can't share that."
    assert paused.stop_reason == "pause_turn"


class Answer(BaseModel):
    answer: str
    confidence: float


async def test_native_structured_output(clients: Clients) -> None:
    schema = Answer.model_json_schema()
    fmt = {"format": {"type": "json_schema", "schema": schema}}
    async with serve() as sim:
        http = clients.http(sim)
        resp = await http.post("/v1/messages", json=_body("hi", output_config=fmt))
    text = resp.json()["content"][0]["text"]
    jsonschema.validate(json.loads(text), schema)
    Answer.model_validate_json(text)


@pytest.mark.parametrize(
    ("status", "error", "kind"),
    [
        (400, anthropic.BadRequestError, "invalid_request_error"),
        (403, anthropic.PermissionDeniedError, "permission_error"),
        (404, anthropic.NotFoundError, "not_found_error"),
        (429, anthropic.RateLimitError, "rate_limit_error"),
        (500, anthropic.InternalServerError, "api_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
    ],
)
async def test_status_faults_map_to_sdk_errors(
    clients: Clients, status: int, error: type[anthropic.APIStatusError], kind: str
) -> None:
    fault = Fault(kind="status", status=status, retry_after=2)
    async with serve(Script(rules=[Rule(reply=Reply(fault=fault))])) as sim:
        client = clients.anthropic(sim)
        with pytest.raises(error) as caught:
            await client.messages.create(model="c", max_tokens=10, messages=USER)
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error" and body["error"]["type"] == kind
    headers = caught.value.response.headers
    assert headers["request-id"] == body["request_id"]
    assert headers["retry-after"] == "2"


async def test_count_tokens(clients: Clients) -> None:
    async with serve() as sim:
        client = clients.anthropic(sim)
        counted = await client.messages.count_tokens(model="c", messages=USER)
        message = await client.messages.create(model="c", max_tokens=10, messages=USER)
    assert counted.input_tokens == message.usage.input_tokens

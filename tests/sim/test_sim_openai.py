"""The official openai SDK against the simulator, and strict checks of the raw wire."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest
from pydantic import BaseModel
from sim_helpers import USER, Clients, openai_chunks, validate_openai

from raygent.sim import Fault, Match, Reply, Rule, Script, ToolCallReply, serve

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
SCRIPT = Script(
    rules=[
        Rule(
            match=Match(last_user="weather"),
            reply=Reply(
                text="Checking.",
                tool_calls=[
                    ToolCallReply("get_weather", {"city": "Paris", "days": [1, 2]}),
                    ToolCallReply("get_time", '{"tz": "CET"}', id="call_custom"),
                ],
            ),
        ),
        Rule(match=Match(last_user="secret"), reply=Reply(refusal="I can't share that.")),
        Rule(match=Match(last_user="reason"), reply=Reply(thinking="a" * 40, text="done")),
    ]
)


async def test_complete_default_reply(clients: Clients) -> None:
    async with serve() as sim:
        client = clients.openai(sim)
        result = await client.chat.completions.create(model="gpt-4o", messages=USER)
    choice = result.choices[0]
    assert choice.message.content == "Simulated reply to: Hello there, simulator!"
    assert choice.finish_reason == "stop"
    assert result.model == "gpt-4o"
    assert result.usage is not None
    assert result.usage.total_tokens == result.usage.prompt_tokens + result.usage.completion_tokens


async def test_raw_body_is_strictly_valid(clients: Clients) -> None:
    async with serve(SCRIPT) as sim:
        http = clients.http(sim)
        for text in ("hi", "weather?", "secret", "reason"):
            body = {"model": "m", "messages": [{"role": "user", "content": text}]}
            resp = await http.post("/v1/chat/completions", json=body)
            assert resp.status_code == 200
            assert resp.headers["x-request-id"].startswith("req_")
            validate_openai(resp.json())


async def test_stream_with_usage(clients: Clients) -> None:
    long_text = "The quick brown fox jumps over the lazy dog. " * 4
    script = Script(rules=[Rule(reply=Reply(text=long_text))])
    async with serve(script) as sim:
        client = clients.openai(sim)
        stream = await client.chat.completions.create(
            model="gpt-4o",
            messages=USER,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == long_text
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 3
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == -(-len(long_text) // 4)
    assert chunks[-2].choices[0].finish_reason == "stop"


async def test_raw_stream_without_usage_is_strictly_valid(clients: Clients) -> None:
    async with serve(SCRIPT) as sim:
        http = clients.http(sim)
        for text in ("hi", "weather", "secret"):
            body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": text}]}
            resp = await http.post("/v1/chat/completions", json=body)
            assert resp.headers["content-type"].startswith("text/event-stream")
            chunks = openai_chunks(resp.text)
            assert all(c.usage is None for c in chunks)
            assert chunks[-1].choices[0].finish_reason in ("stop", "tool_calls")


async def test_tool_calls(clients: Clients) -> None:
    async with serve(SCRIPT) as sim:
        client = clients.openai(sim)
        result = await client.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "what's the weather?"}],
            tools=TOOLS,
        )
    message = result.choices[0].message
    assert result.choices[0].finish_reason == "tool_calls"
    assert message.content == "Checking."
    calls = message.tool_calls or []
    assert [c.id for c in calls] == ["call_1", "call_custom"]
    assert [c.function.name for c in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris", "days": [1, 2]}
    assert calls[1].function.arguments == '{"tz": "CET"}'


async def test_tool_call_ids_continue_the_conversation(clients: Clients) -> None:
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "weather"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "user", "content": "weather again"},
    ]
    async with serve(SCRIPT) as sim:
        client = clients.openai(sim)
        result = await client.chat.completions.create(model="m", messages=history)
    assert [c.id for c in result.choices[0].message.tool_calls or []] == ["call_2", "call_custom"]


async def test_streamed_tool_calls(clients: Clients) -> None:
    async with serve(SCRIPT) as sim:
        client = clients.openai(sim)
        async with client.chat.completions.stream(
            model="gpt-4o",
            messages=[{"role": "user", "content": "weather"}],
            tools=TOOLS,
        ) as stream:
            final = await stream.get_final_completion()
        http = clients.http(sim)
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "weather"}]}
        raw = (await http.post("/v1/chat/completions", json=body)).text
    calls = final.choices[0].message.tool_calls or []
    assert json.loads(calls[0].function.arguments) == {"city": "Paris", "days": [1, 2]}
    assert calls[1].function.arguments == '{"tz": "CET"}'
    deltas = [
        d for c in openai_chunks(raw) if c.choices for d in c.choices[0].delta.tool_calls or []
    ]
    first = deltas[0]
    assert (first.index, first.id, first.type) == (0, "call_1", "function")
    assert first.function is not None and first.function.arguments == ""
    assert all(d.id is None for d in deltas if d.function and d.function.arguments)


class Person(BaseModel):
    name: str
    age: int
    tags: list[str]


async def test_json_schema_output(clients: Clients) -> None:
    async with serve() as sim:
        client = clients.openai(sim)
        parsed = await client.chat.completions.parse(
            model="gpt-4o", messages=USER, response_format=Person
        )
        raw = await client.chat.completions.create(
            model="gpt-4o",
            messages=USER,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "person", "schema": Person.model_json_schema()},
            },
        )
    assert isinstance(parsed.choices[0].message.parsed, Person)
    content = raw.choices[0].message.content or ""
    jsonschema.validate(json.loads(content), Person.model_json_schema())
    Person.model_validate_json(content)


async def test_json_object_mode(clients: Clients) -> None:
    async with serve() as sim:
        client = clients.openai(sim)
        result = await client.chat.completions.create(
            model="m",
            messages=USER,
            response_format={"type": "json_object"},
        )
    assert isinstance(json.loads(result.choices[0].message.content or ""), dict)


async def test_refusal_and_reasoning_tokens(clients: Clients) -> None:
    async with serve(SCRIPT) as sim:
        client = clients.openai(sim)
        refused = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "secret"}]
        )
        reasoned = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "reason"}]
        )
    message = refused.choices[0].message
    assert (message.refusal, message.content) == ("I can't share that.", None)
    assert refused.choices[0].finish_reason == "stop"
    assert reasoned.choices[0].message.content == "done"
    usage = reasoned.usage
    assert usage is not None and usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 10
    assert usage.completion_tokens == 11


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, openai.BadRequestError),
        (403, openai.PermissionDeniedError),
        (404, openai.NotFoundError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
async def test_status_faults_map_to_sdk_errors(
    clients: Clients, status: int, error: type[openai.APIStatusError]
) -> None:
    script = Script(rules=[Rule(reply=Reply(fault=Fault(kind="status", status=status)))])
    async with serve(script) as sim:
        client = clients.openai(sim)
        with pytest.raises(error) as caught:
            await client.chat.completions.create(model="m", messages=USER)
    body = caught.value.body
    assert isinstance(body, dict) and set(body) == {"message", "type", "param", "code"}
    assert caught.value.response.headers["x-request-id"].startswith("req_")

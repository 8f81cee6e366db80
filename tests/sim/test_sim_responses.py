"""The official openai SDK's Responses client against the simulator's /v1/responses, and
strict checks of the raw wire (every field one the SDK declares)."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import BaseModel, TypeAdapter
from sim_helpers import Clients, assert_no_extra

from raygent.sim import Fault, Match, Reply, Rule, Script, ToolCallReply, serve

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": False,
    }
]
SCRIPT = Script(
    rules=[
        Rule(match=Match(after_tool_result=True), reply=Reply(text="18C in Paris.")),
        Rule(
            match=Match(last_user="weather"),
            reply=Reply(
                text="Checking.",
                tool_calls=[
                    ToolCallReply("get_weather", {"city": "Paris"}),
                    ToolCallReply("get_time", '{"tz": "CET"}', id="call_custom"),
                ],
            ),
        ),
        Rule(match=Match(last_user="secret"), reply=Reply(refusal="I can't share that.")),
        Rule(match=Match(last_user="reason"), reply=Reply(thinking="a" * 40, text="done")),
        Rule(match=Match(last_user="essay"), reply=Reply(text="word " * 100)),
    ]
)


class City(BaseModel):
    name: str
    population: int


def strict_events(raw: str) -> list[Any]:
    """Each SSE event of a Responses stream, validated strictly; names match types."""
    events = []
    for block in raw.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        event = EVENTS.validate_json(lines["data"], strict=True)
        assert event.type == lines["event"]
        assert_no_extra(event)
        events.append(event)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    return events


async def test_create_text_and_usage(clients: Clients) -> None:
    async with serve(SCRIPT) as sim:
        result = await clients.openai(sim).responses.create(model="gpt-4.1", input="Hello there")
    assert result.output_text == "Simulated reply to: Hello there"
    assert result.status == "completed" and result.model == "gpt-4.1"
    assert result.usage is not None
    assert result.usage.total_tokens == result.usage.input_tokens + result.usage.output_tokens


async def test_tool_round(clients: Clients) -> None:
    async with serve(SCRIPT) as sim:
        client = clients.openai(sim)
        first = await client.responses.create(model="m", input="weather?", tools=TOOLS)
        calls = [item for item in first.output if item.type == "function_call"]
        assert [(c.call_id, c.name, c.arguments) for c in calls] == [
            ("call_1", "get_weather", '{"city": "Paris"}'),
            ("call_custom", "get_time", '{"tz": "CET"}'),
        ]
        history: list[Any] = [{"role": "user", "content": "weather?"}]
        history += [c.model_dump(exclude_none=True) for c in calls]
        history += [
            {"type": "function_call_output", "call_id": c.call_id, "output": "18C"} for c in calls
        ]
        second = await client.responses.create(model="m", input=history, tools=TOOLS)
    assert first.output_text == "Checking."
    assert second.output_text == "18C in Paris."


async def test_structured_output_parses(clients: Clients) -> None:
    async with serve() as sim:
        parsed = await clients.openai(sim).responses.parse(
            model="gpt-4.1", input="a city", text_format=City
        )
    assert isinstance(parsed.output_parsed, City)


async def test_reasoning_is_encrypted_only_when_included(clients: Clients) -> None:
    async with serve(SCRIPT) as sim:
        client = clients.openai(sim)
        plain = await client.responses.create(model="o3", input="reason")
        included = await client.responses.create(
            model="o3", input="reason", include=["reasoning.encrypted_content"], store=False
        )
        [item] = [i for i in included.output if i.type == "reasoning"]
        replay: list[Any] = [
            {"role": "user", "content": "reason"},
            item.model_dump(exclude_none=True),
            {"role": "user", "content": "reason"},
        ]
        again = await client.responses.create(model="o3", input=replay)
        forged = [{**replay[1], "encrypted_content": "gAAAAsimforged"}]
        with pytest.raises(openai.BadRequestError, match="could not be verified"):
            await client.responses.create(model="o3", input=[replay[0], *forged])
    [plain_item] = [i for i in plain.output if i.type == "reasoning"]
    assert plain_item.encrypted_content is None
    assert item.encrypted_content and item.summary[0].text == "a" * 40
    assert again.output_text == "done"
    assert (
        included.usage is not None and included.usage.output_tokens_details.reasoning_tokens == 10
    )


async def test_stream_helper_and_final_response(clients: Clients) -> None:
    async with serve(SCRIPT) as sim:
        client = clients.openai(sim)
        async with client.responses.stream(model="m", input="weather?", tools=TOOLS) as stream:
            kinds = [event.type async for event in stream]
            final = await stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.function_call_arguments.delta" in kinds
    assert final.output_text == "Checking."
    assert [i.name for i in final.output if i.type == "function_call"] == [
        "get_weather",
        "get_time",
    ]


async def test_create_stream_deltas_add_up(clients: Clients) -> None:
    async with serve(SCRIPT) as sim:
        stream = await clients.openai(sim).responses.create(model="m", input="essay", stream=True)
        events = [event async for event in stream]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "word " * 100
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == text


@pytest.mark.parametrize("text", ["hi", "weather?", "secret", "reason", "essay"])
@pytest.mark.parametrize("stream", [False, True])
async def test_raw_wire_is_strictly_valid(clients: Clients, text: str, stream: bool) -> None:
    body = {
        "model": "m",
        "input": [{"role": "user", "content": text}],
        "include": ["reasoning.encrypted_content"],
        "max_output_tokens": 30,
        "stream": stream,
    }
    async with serve(SCRIPT) as sim:
        resp = await clients.http(sim).post("/v1/responses", json=body)
    assert resp.status_code == 200 and resp.headers["x-request-id"].startswith("req_")
    if stream:
        events = strict_events(resp.text)
        final = events[-1].response
    else:
        final = Response.model_validate(resp.json(), strict=True)
        assert_no_extra(final)
    if text == "essay":  # cut by max_output_tokens
        assert (
            final.status == "incomplete" and final.incomplete_details.reason == "max_output_tokens"
        )
    if text == "secret":
        assert final.output[0].content[0].type == "refusal"


async def test_faults_and_stats(clients: Clients) -> None:
    script = [
        Rule(
            match=Match(last_user="busy"),
            reply=Reply(fault=Fault(kind="status", status=429, retry_after=3)),
        )
    ]
    async with serve(script) as sim:
        client = clients.openai(sim)
        with pytest.raises(openai.RateLimitError) as info:
            await client.responses.create(model="m", input="busy")
        await client.responses.create(model="m", input="fine")
        stats = sim.stats()
    assert info.value.response.headers["retry-after"] == "3"
    assert stats.by_api == {"openai_responses": 2}
    assert stats.by_status == {429: 1, 200: 1} and stats.faults == 1


async def test_bad_requests_are_the_providers_400(clients: Clients) -> None:
    async with serve() as sim:
        http = clients.http(sim)
        missing = await http.post("/v1/responses", json={"model": "m"})
        unknown = await http.post(
            "/v1/responses", json={"model": "m", "input": [{"type": "teleport"}]}
        )
    assert missing.status_code == unknown.status_code == 400
    assert missing.json()["error"]["param"] == "input"
    assert "teleport" in unknown.json()["error"]["message"]

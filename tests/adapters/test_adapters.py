"""Both adapters against the simulator over real HTTP: text, tools, JSON, streaming."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from adapter_support import PRICING, make_model

from raygent import (
    AssistantMessage,
    Capabilities,
    ModelOptions,
    ResponseSchema,
    SystemMessage,
    ToolMessage,
    ToolSpec,
    UserMessage,
    total_cost,
)
from raygent.errors import InvalidOptionsError
from raygent.models import Done, ModelResponse, StreamChunk, TextDelta, ToolCallDelta, UsageChunk
from raygent.sim import Match, Reply, Rule, ToolCallReply, serve

SEARCH = ToolSpec(
    name="search",
    description="Search the web.",
    parameters={
        "type": "object",
        "properties": {"q": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["q"],
    },
)

SCRIPT = [
    Rule(match=Match(last_user="weather"), reply=Reply(text="It is sunny in Paris today.")),
    Rule(
        match=Match(last_user="look up", after_tool_result=False),
        reply=Reply(
            text="Searching.",
            tool_calls=[
                ToolCallReply("search", {"q": "ray", "limit": 3}),
                ToolCallReply("search", {"q": "httpx"}),
            ],
        ),
    ),
    Rule(match=Match(after_tool_result=True), reply=Reply(text="Found 2 things.")),
    Rule(match=Match(last_user="json please"), reply=Reply(json="schema")),
]


async def collect(model: Any, messages: list[Any], options: ModelOptions | None = None) -> Any:
    chunks: list[StreamChunk] = [c async for c in model.stream(messages, options)]
    assert isinstance(chunks[-1], Done)
    assert not any(isinstance(c, Done) for c in chunks[:-1])
    return chunks


def same_reply(a: ModelResponse, b: ModelResponse) -> None:
    assert (a.text, a.tool_calls, a.finish_reason) == (b.text, b.tool_calls, b.finish_reason)
    assert a.usage == b.usage
    assert a.blocks == b.blocks


async def test_text_reply(provider: str) -> None:
    async with serve(SCRIPT) as sim:
        model = make_model(provider, sim, pricing=PRICING)
        reply = await model.complete(
            [SystemMessage(content="Be brief."), UserMessage(content="weather in Paris?")]
        )
    assert reply.text == "It is sunny in Paris today."
    assert reply.finish_reason == "stop"
    assert reply.tool_calls == []
    assert reply.provider == model.provider
    assert reply.response_id or provider == "bedrock"  # a Converse reply carries no id
    assert model.provider == provider.removesuffix("_responses")
    assert reply.usage.requests == 1
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0
    assert reply.usage.input_includes_cache is (provider not in ("anthropic", "bedrock"))
    assert total_cost(reply.usage) == pytest.approx(
        (reply.usage.total_input_tokens * 1.0 + reply.usage.output_tokens * 2.0) / 1e6
    )


async def test_a_side_call_takes_message_dicts(provider: str) -> None:
    """`model.complete` / `stream` / `request_body` take message dicts as the agent
    does (the reference's summariser calls the model with plain dicts)."""
    typed = [SystemMessage(content="Be brief."), UserMessage(content="weather in Paris?")]
    plain = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "weather in Paris?"},
    ]
    async with serve(SCRIPT) as sim:
        model = make_model(provider, sim)
        reply = await model.complete(plain)
        streamed = await collect(model, plain)
    assert reply.text == "It is sunny in Paris today."
    assert isinstance(streamed[-1], Done)
    assert model.request_body(plain, None, stream=False) == model.request_body(
        typed, None, stream=False
    )
    with pytest.raises(InvalidOptionsError, match=r"messages\[1\]: unknown role"):
        model.request_body([plain[0], {"role": "robot", "content": "x"}], None, stream=False)


async def test_unknown_pricing_leaves_cost_none(provider: str) -> None:
    async with serve(SCRIPT) as sim:
        # Bedrock's test model is priced by genai-prices: an id it does not know is not.
        unknown = {"model_id": "acme.unpriced-v1:0"} if provider == "bedrock" else {}
        model = make_model(provider, sim, **unknown)
        reply = await model.complete([UserMessage(content="weather?")])
    assert reply.usage.cost is None


async def test_tool_calls_and_their_results(provider: str) -> None:
    options = ModelOptions(tools=(SEARCH,))
    async with serve(SCRIPT) as sim:
        model = make_model(provider, sim)
        first = await model.complete([UserMessage(content="look up ray")], options)
        assert first.finish_reason == "tool_calls"
        assert [(c.name, c.arguments) for c in first.tool_calls] == [
            ("search", {"q": "ray", "limit": 3}),
            ("search", {"q": "httpx"}),
        ]
        assert len({c.call_id for c in first.tool_calls}) == 2
        results = [ToolMessage(call_id=c.call_id, content="result") for c in first.tool_calls]
        history = [UserMessage(content="look up ray"), first.message, *results]
        second = await model.complete(history, options)
        body = sim.requests[-1].body
    assert second.text == "Found 2 things."
    sent = json.dumps(body)
    assert all(c.call_id in sent for c in first.tool_calls)


async def test_json_output_satisfies_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "temp_c": {"type": "number"}},
        "required": ["city", "temp_c"],
        "additionalProperties": False,
    }
    options = ModelOptions(response_schema=ResponseSchema(name="weather", schema=schema))
    async with serve(SCRIPT) as sim:
        reply = await make_model("openai", sim).complete(
            [UserMessage(content="json please")], options
        )
        sent = sim.requests[-1].body
    data = json.loads(reply.text)
    assert set(data) == {"city", "temp_c"}
    assert isinstance(data["city"], str) and isinstance(data["temp_c"], int | float)
    assert sent["response_format"]["json_schema"]["schema"] == schema


async def test_options_the_model_cannot_use_are_not_sent(provider: str) -> None:
    options = ModelOptions(
        tools=(SEARCH,), response_schema=ResponseSchema(schema={"type": "object"})
    )
    caps = Capabilities(tools=False, structured_output=False)
    async with serve(SCRIPT) as sim:
        await make_model(provider, sim, capabilities=caps).complete(
            [UserMessage(content="weather")], options
        )
        body = sim.requests[-1].body
    assert "tools" not in body and "response_format" not in body


async def test_provider_options_reach_only_their_adapter(provider: str) -> None:
    options = ModelOptions(
        provider_options={
            "openai": {"user": "u-1"},
            "openai_responses": {"safety_identifier": "u-3"},
            "anthropic": {"metadata": {"user_id": "u-2"}},
            "bedrock": {"requestMetadata": {"user": "u-4"}},
            "gemini": {"labels": {"user": "u-4"}},
        }
    )
    async with serve(SCRIPT) as sim:
        await make_model(provider, sim).complete([UserMessage(content="weather")], options)
        body = sim.requests[-1].body
    if provider == "openai":
        assert body["user"] == "u-1" and "metadata" not in body
    elif provider == "openai_responses":
        assert body["safety_identifier"] == "u-3" and "user" not in body and "metadata" not in body
    elif provider == "bedrock":
        assert body["requestMetadata"] == {"user": "u-4"} and "metadata" not in body
    elif provider == "gemini":
        assert body["labels"] == {"user": "u-4"} and "user" not in body and "metadata" not in body
    else:
        assert body["metadata"] == {"user_id": "u-2"} and "user" not in body


async def test_stream_text_matches_complete(provider: str) -> None:
    messages = [UserMessage(content="weather in Paris?")]
    async with serve(SCRIPT) as sim:
        model = make_model(provider, sim, pricing=PRICING)
        whole = await model.complete(messages)
        chunks = await collect(model, messages)
    deltas = [c.text for c in chunks if isinstance(c, TextDelta)]
    assert len(deltas) > 1
    assert "".join(deltas) == whole.text
    assert any(isinstance(c, UsageChunk) for c in chunks)
    same_reply(chunks[-1].response, whole)


async def test_stream_tool_calls_match_complete(provider: str) -> None:
    messages = [UserMessage(content="look up ray")]
    options = ModelOptions(tools=(SEARCH,))
    async with serve(SCRIPT) as sim:
        model = make_model(provider, sim)
        whole = await model.complete(messages, options)
        chunks = await collect(model, messages, options)
    done = chunks[-1].response
    same_reply(done, whole)
    by_call: dict[str, str] = {}
    for c in chunks:
        if isinstance(c, ToolCallDelta):
            by_call[c.call_id] = by_call.get(c.call_id, "") + c.arguments_delta
    assert [json.loads(by_call[c.call_id]) for c in done.tool_calls] == [
        c.arguments for c in done.tool_calls
    ]


async def test_a_conversation_with_an_assistant_turn_replays(provider: str) -> None:
    history = [
        SystemMessage(content="Be brief."),
        UserMessage(content="hello"),
        AssistantMessage(content="Hi."),
        UserMessage(content="weather?"),
    ]
    async with serve(SCRIPT) as sim:
        reply = await make_model(provider, sim).complete(history)
    assert reply.text == "It is sunny in Paris today."


async def test_holds_up_at_96_requests_in_flight(provider: str) -> None:
    from raygent.sim import Latency

    # The latency is long enough for all 96 to be sent before the first answer.
    async with serve(SCRIPT, latency=Latency(fixed_ms=1000)) as sim:
        model = make_model(provider, sim)
        replies = await asyncio.gather(
            *(model.complete([UserMessage(content=f"weather {i}")]) for i in range(96))
        )
        stats = sim.stats()
    assert all(r.text == "It is sunny in Paris today." for r in replies)
    assert stats.peak_in_flight >= 64
    assert stats.by_status == {200: 96}

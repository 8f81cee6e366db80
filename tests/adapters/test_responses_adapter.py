"""OpenAIResponsesModel against the simulator's /v1/responses over real HTTP: what only the
Responses wire has (encrypted reasoning replayed, `text.format`, `store`), usage, stream
errors. The behaviour shared with the other adapters (text, tools, typed errors, abort,
truncation) runs in test_adapters.py and test_adapter_errors.py (`openai_responses`)."""

from __future__ import annotations

import json

import pytest

from raygent import (
    ModelOptions,
    OpenAIResponsesModel,
    Pricing,
    ProviderBlock,
    ResponseSchema,
    SystemMessage,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from raygent.errors import InvalidRequestError, RateLimitError, ServerError
from raygent.models import Done, ReasoningDelta, ReasoningOptions, ToolCallDelta
from raygent.sim import Fault, Match, Reply, Rule, ToolCallReply, serve

KEY = "sk-test-key-000000"
PRICING = Pricing(
    input_per_mtok=3.0, output_per_mtok=15.0, cached_input_per_mtok=0.3, reasoning_per_mtok=15.0
)
WEATHER = ToolSpec(
    name="weather",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
THINKING = "First the city, then the weather service. " * 3
SCRIPT = [
    Rule(match=Match(after_tool_result=True), reply=Reply(text="18C in Paris.")),
    Rule(
        match=Match(last_user="weather"),
        reply=Reply(
            thinking=THINKING,
            text="Checking.",
            tool_calls=[ToolCallReply("weather", {"city": "Paris"})],
        ),
    ),
]
OPTIONS = ModelOptions(tools=(WEATHER,), reasoning=ReasoningOptions(effort="low"))
ASK = [SystemMessage(content="Be brief."), UserMessage(content="weather in Paris?")]


def gpt5(sim: object, **kwargs: object) -> OpenAIResponsesModel:
    return OpenAIResponsesModel(
        "gpt-5-mini",
        base_url=sim.openai_base_url,  # type: ignore[attr-defined]
        api_key=KEY,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_encrypted_reasoning_is_replayed_verbatim(streamed: bool) -> None:
    async with serve(SCRIPT) as sim:
        model = gpt5(sim, pricing=PRICING)
        if streamed:
            chunks = [c async for c in model.stream(ASK, OPTIONS)]
            assert isinstance(chunks[-1], Done)
            first = chunks[-1].response
            reasoning = "".join(c.text for c in chunks if isinstance(c, ReasoningDelta))
            assert reasoning == THINKING
            calls = [c for c in chunks if isinstance(c, ToolCallDelta)]
            assert "".join(c.arguments_delta for c in calls) == '{"city": "Paris"}'
        else:
            first = await model.complete(ASK, OPTIONS)
        asked = sim.requests[-1].body
        [block] = first.blocks
        [call] = first.tool_calls
        history = [*ASK, first.message, ToolMessage(call_id=call.call_id, content="18C")]
        second = await model.complete(history, OPTIONS)
        replayed = sim.requests[-1].body
    assert asked["store"] is False and asked["include"] == ["reasoning.encrypted_content"]
    assert asked["reasoning"] == {"summary": "auto", "effort": "low"}
    assert block.provider == "openai" and block.kind == "reasoning"
    assert block.data["encrypted_content"] and block.data["summary"][0]["text"] == THINKING
    assert (first.finish_reason, call.name, call.arguments) == (
        "tool_calls",
        "weather",
        {"city": "Paris"},
    )
    # The simulator checks the encrypted content against the summary: a changed item is a 400.
    assert second.text == "18C in Paris."
    kinds = [item.get("type", "message") for item in replayed["input"]]
    assert kinds == [
        "message",
        "message",
        "reasoning",
        "message",
        "function_call",
        "function_call_output",
    ]
    assert replayed["input"][2] == block.data


async def test_an_altered_reasoning_item_is_refused() -> None:
    async with serve(SCRIPT) as sim:
        model = gpt5(sim)
        first = await model.complete(ASK, OPTIONS)
        [block] = first.blocks
        forged = ProviderBlock(
            provider="openai",
            kind="reasoning",
            data={**block.data, "summary": [{"type": "summary_text", "text": "forged"}]},
        )
        message = first.message.model_copy(update={"content": [forged]})
        history = [*ASK, message, ToolMessage(call_id=first.tool_calls[0].call_id, content="x")]
        with pytest.raises(InvalidRequestError, match="could not be verified"):
            await model.complete(history, OPTIONS)


async def test_store_true_asks_for_no_encrypted_reasoning() -> None:
    async with serve(SCRIPT) as sim:
        reply = await gpt5(sim, store=True).complete(ASK, OPTIONS)
        body = sim.requests[-1].body
    assert body["store"] is True and "include" not in body
    [block] = reply.blocks
    assert block.data.get("encrypted_content") is None


async def test_a_chat_model_sends_no_reasoning_fields() -> None:
    async with serve(SCRIPT) as sim:
        model = OpenAIResponsesModel("gpt-4.1", base_url=sim.openai_base_url, api_key=KEY)
        await model.complete(ASK, OPTIONS)
        body = sim.requests[-1].body
    assert "include" not in body and "reasoning" not in body


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_structured_output_follows_the_schema(streamed: bool) -> None:
    schema = ResponseSchema(
        name="city",
        schema={
            "type": "object",
            "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
            "required": ["name", "population"],
            "additionalProperties": False,
        },
    )
    options = ModelOptions(response_schema=schema)
    async with serve() as sim:
        model = gpt5(sim)
        if streamed:
            chunks = [c async for c in model.stream([UserMessage(content="a city")], options)]
            assert isinstance(chunks[-1], Done)
            reply = chunks[-1].response
        else:
            reply = await model.complete([UserMessage(content="a city")], options)
        body = sim.requests[-1].body
    assert body["text"] == {
        "format": {
            "type": "json_schema",
            "name": "city",
            "schema": schema.json_schema,
            "strict": True,
        }
    }
    value = json.loads(reply.text)
    assert isinstance(value["name"], str) and isinstance(value["population"], int)


async def test_usage_has_cached_and_reasoning_tokens() -> None:
    long_system = SystemMessage(content="You follow the house rules. " * 400)
    script = [Rule(reply=Reply(thinking="step by step " * 30, text="42"))]
    messages = [long_system, UserMessage(content="think")]
    async with serve(script) as sim:
        model = gpt5(sim, pricing=PRICING)
        first = await model.complete(messages)
        second = [c async for c in model.stream(messages)][-1]
    assert isinstance(second, Done)
    usage = second.response.usage
    assert first.usage.cached_tokens == 0
    assert 0 < usage.cached_tokens <= usage.input_tokens and usage.input_includes_cache
    assert usage.reasoning_tokens > 0 and usage.output_tokens > usage.reasoning_tokens
    assert usage.cost is not None
    assert usage.cost.cached_input == pytest.approx(usage.cached_tokens * 0.3 / 1e6)
    assert usage.cost.input == pytest.approx((usage.input_tokens - usage.cached_tokens) * 3 / 1e6)
    assert usage.cost.reasoning == pytest.approx(usage.reasoning_tokens * 15.0 / 1e6)


@pytest.mark.parametrize(
    ("status", "error"), [(429, RateLimitError), (500, ServerError), (503, ServerError)]
)
async def test_an_error_event_in_the_stream_is_typed(status: int, error: type[Exception]) -> None:
    fault = Fault(kind="stream_error", status=status, after_chunks=3)
    async with serve([Rule(reply=Reply(text="word " * 50, fault=fault))]) as sim:
        seen = []
        with pytest.raises(error) as info:
            async for chunk in gpt5(sim).stream([UserMessage(content="hi")]):
                seen.append(chunk)
    assert info.value.retryable  # type: ignore[attr-defined]
    assert not any(isinstance(c, Done) for c in seen)


async def test_unset_strict_is_not_strict() -> None:
    """The Responses API makes a function strict unless told: ours keep the Chat meaning."""
    strict = ToolSpec(name="exact", strict=True)
    async with serve(SCRIPT) as sim:
        await gpt5(sim).complete(ASK, ModelOptions(tools=(WEATHER, strict)))
        tools = sim.requests[-1].body["tools"]
    assert [(t["name"], t["strict"]) for t in tools] == [("weather", False), ("exact", True)]

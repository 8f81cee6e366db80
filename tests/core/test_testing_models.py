"""ScriptedModel and FunctionModel: scripted replies, streaming parity, aborts, usage."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from raygent import AbortController, Model, ModelOptions, ModelResponse, Pricing, ToolSpec, Usage
from raygent.errors import AbortedError, InvalidOptionsError, RateLimitError, ServerError
from raygent.messages import (
    AssistantMessage,
    Message,
    ProviderBlock,
    SystemMessage,
    ToolCall,
    UserMessage,
)
from raygent.models.contract import (
    Done,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
)
from raygent.testing import (
    FunctionModel,
    ScriptedModel,
    ScriptExhausted,
    Step,
    call,
    hang,
    reply,
)

HELLO: list[Message] = [UserMessage(content="hello there!")]  # 12 chars: 3 tokens
PRICING = Pricing(input_per_mtok=1_000_000, output_per_mtok=2_000_000)  # $1 / $2 a token

STEPS: dict[str, Step] = {
    "text": "The answer is 42.",
    "empty": "",
    "tool-calls": reply(
        "Let me look.", [call("search", {"q": "x"}), call("calc", {"e": "1+2"}, call_id="mine")]
    ),
    "malformed": reply(tool_calls=[call("search", raw='{"q": ')]),
    "reasoning": reply("Done.", reasoning="First think, then answer.", finish="length"),
    "blocks": reply(blocks=[ProviderBlock(provider="test", kind="other", data={"a": 1})]),
    "response": ModelResponse(
        content=[], finish_reason="refusal", usage=Usage(), provider="x", refusal="no"
    ),
    "callable": lambda messages, options: f"{len(messages)} message(s)",
}


async def _collect(model: Model, messages: list[Message] = HELLO, **kw: Any) -> list[StreamChunk]:
    return [chunk async for chunk in model.stream(messages, **kw)]


@pytest.mark.parametrize("kind", list(STEPS))
async def test_stream_ends_with_what_complete_returns(kind: str) -> None:
    completed = await ScriptedModel([STEPS[kind]]).complete(HELLO)
    chunks = await _collect(ScriptedModel([STEPS[kind]]))
    assert chunks[-1] == Done(completed)
    assert chunks[-2] == UsageChunk(completed.usage)
    text = "".join(c.text for c in chunks if isinstance(c, TextDelta))
    assert text == completed.text
    for index, tool_call in enumerate(completed.tool_calls):
        deltas = [c for c in chunks if isinstance(c, ToolCallDelta) and c.index == index]
        assert {(d.call_id, d.name) for d in deltas} == {(tool_call.call_id, tool_call.name)}
        assert "".join(d.arguments_delta for d in deltas) == tool_call.arguments_text


async def test_text_reply() -> None:
    model = ScriptedModel(["The answer is 42."])
    response = await model.complete(HELLO)
    assert (response.text, response.finish_reason, response.tool_calls) == (
        "The answer is 42.",
        "stop",
        [],
    )
    assert (response.model, response.provider, response.response_id) == (
        "scripted",
        "test",
        "resp_1",
    )
    assert response.message == AssistantMessage(content="The answer is 42.")
    chunks = await _collect(ScriptedModel(["The answer is 42."]))
    assert len([c for c in chunks if isinstance(c, TextDelta)]) == 3


async def test_tool_calls_get_deterministic_ids_per_model() -> None:
    model = ScriptedModel(
        [
            reply(tool_calls=[call("a", {"x": 1}), call("b", call_id="given")]),
            reply(tool_calls=[call("c", {"y": [1, 2]})]),
        ]
    )
    first, second = await model.complete(HELLO), await model.complete(HELLO)
    assert [(c.call_id, c.name, c.arguments) for c in first.tool_calls] == [
        ("call_1", "a", {"x": 1}),
        ("given", "b", {}),
    ]
    assert second.tool_calls == [ToolCall.parse("call_2", "c", '{"y": [1, 2]}')]
    assert first.finish_reason == second.finish_reason == "tool_calls"


async def test_malformed_arguments_parse_to_none() -> None:
    response = await ScriptedModel([STEPS["malformed"]]).complete(HELLO)
    (tool_call,) = response.tool_calls
    assert tool_call.arguments is None and tool_call.arguments_text == '{"q": '
    with pytest.raises(ValueError, match="not both"):
        call("x", {"a": 1}, raw="{}")


async def test_reasoning_becomes_a_block_and_reasoning_deltas() -> None:
    response = await ScriptedModel([STEPS["reasoning"]]).complete(HELLO)
    (block,) = response.blocks
    assert (block.kind, block.data["thinking"]) == ("thinking", "First think, then answer.")
    assert response.finish_reason == "length"
    assert response.usage.reasoning_tokens == 7  # 25 chars
    chunks = await _collect(ScriptedModel([STEPS["reasoning"]]))
    reasoning = "".join(c.text for c in chunks if isinstance(c, ReasoningDelta))
    assert reasoning == "First think, then answer."
    assert isinstance(chunks[0], ReasoningDelta)  # thinking streams before the text


async def test_a_model_response_step_is_used_as_is() -> None:
    assert await ScriptedModel([STEPS["response"]]).complete(HELLO) is STEPS["response"]


@pytest.mark.parametrize("step", [RateLimitError("slow down", retry_after=1), ServerError])
async def test_exception_steps_are_raised(step: Step) -> None:
    model = ScriptedModel([step, "after"])
    with pytest.raises((RateLimitError, ServerError)):
        await model.complete(HELLO)
    assert (await model.complete(HELLO)).text == "after"
    with pytest.raises((RateLimitError, ServerError)):
        await _collect(ScriptedModel([step]))


async def test_script_exhaustion_is_a_clear_error() -> None:
    model = ScriptedModel(["only one"])
    await model.complete(HELLO)
    assert model.remaining == 0
    with pytest.raises(ScriptExhausted, match="got request 2 but its script has only 1 step"):
        await model.complete([UserMessage(content="one more?")])
    assert isinstance(ScriptExhausted("x"), RuntimeError)


async def test_a_lone_string_is_one_reply() -> None:
    model = ScriptedModel("hi")
    assert model.remaining == 1 and (await model.complete(HELLO)).text == "hi"


async def test_callable_steps_see_the_request() -> None:
    async def answer(messages: list[Message], options: ModelOptions) -> Step:
        return reply(f"{messages[-1].text} / {len(options.tools)} tool(s)")

    options = ModelOptions(tools=(ToolSpec(name="search"),))
    model = ScriptedModel([answer, STEPS["callable"]])
    assert (await model.complete(HELLO, options)).text == "hello there! / 1 tool(s)"
    assert (await model.complete(HELLO)).text == "1 message(s)"


async def test_function_model_answers_every_request() -> None:
    seen: list[int] = []

    def fn(messages: list[Message], options: ModelOptions) -> Step:
        seen.append(len(messages))
        if len(messages) == 1:
            return reply(tool_calls=[call("search", {"q": "x"})])
        return "done"

    model = FunctionModel(fn)
    first = await model.complete(HELLO)
    second = await model.complete([*HELLO, first.message])
    assert first.tool_calls[0].call_id == "call_1" and second.text == "done"
    assert seen == [1, 2] and model.name == "function"

    async def afn(messages: list[Message], options: ModelOptions) -> Step:
        return "async"

    chunks = await _collect(FunctionModel(afn))
    assert isinstance(chunks[-1], Done) and chunks[-1].response.text == "async"


async def test_requests_are_recorded() -> None:
    model = ScriptedModel(["a", "b"])
    options = ModelOptions(temperature=0.5)
    await model.complete(HELLO)
    await _collect(model, [*HELLO, AssistantMessage(content="a")], options=options)
    assert [len(messages) for messages, _ in model.requests] == [1, 2]
    assert model.requests[0][1] == ModelOptions() and model.requests[1][1] is options


async def test_usage_is_deterministic_and_priced_only_with_pricing() -> None:
    step = reply("12345678", [call("f", raw="{}")])  # output: 2 + ceil(3/4) = 3 tokens
    usage = (await ScriptedModel([step]).complete(HELLO)).usage
    assert (usage.requests, usage.input_tokens, usage.output_tokens) == (1, 3, 3)
    assert usage.cost is None
    priced = (await ScriptedModel([step], pricing=PRICING).complete(HELLO)).usage
    assert priced.cost is not None
    assert (priced.cost.input, priced.cost.output) == (pytest.approx(3.0), pytest.approx(6.0))
    chunks = await _collect(FunctionModel(lambda m, o: step, pricing=PRICING))
    assert chunks[-2] == UsageChunk(priced)


async def test_declared_usage_wins() -> None:
    fixed = Usage(requests=1, input_tokens=100, output_tokens=10)
    model = ScriptedModel(["a", reply("b", usage=Usage(requests=1))], usage=fixed)
    assert (await model.complete(HELLO)).usage == fixed
    assert (await model.complete(HELLO)).usage == Usage(requests=1)


def test_test_models_satisfy_the_model_protocol() -> None:
    for model in (ScriptedModel([]), FunctionModel(lambda m, o: "x")):
        assert isinstance(model, Model)
        assert model.provider == "test"
        assert all(model.capabilities.model_dump().values())


def _started_then_hang(started: asyncio.Event) -> Step:
    def step(messages: list[Message], options: ModelOptions) -> Step:
        started.set()
        return hang()

    return step


@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])
async def test_abort_releases_a_hanging_request(streaming: bool) -> None:
    started, controller = asyncio.Event(), AbortController()
    model = ScriptedModel([_started_then_hang(started), "next"])
    if streaming:
        task = asyncio.create_task(_collect(model, signal=controller.signal))
    else:
        task = asyncio.create_task(model.complete(HELLO, signal=controller.signal))
    await started.wait()
    controller.abort("user hit stop")
    with pytest.raises(AbortedError, match="user hit stop"):
        await task
    assert (await model.complete(HELLO)).text == "next"


async def test_cancelling_the_task_releases_a_hanging_request() -> None:
    started = asyncio.Event()
    model = FunctionModel(_started_then_hang(started))
    task = asyncio.create_task(model.complete(HELLO, signal=AbortController().signal))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_aborted_signal_stops_the_request_before_it_is_sent() -> None:
    controller = AbortController()
    controller.abort("too late")
    model = ScriptedModel(["unused"])
    with pytest.raises(AbortedError):
        await model.complete(HELLO, signal=controller.signal)
    assert model.requests == [] and model.remaining == 1


async def test_abort_between_stream_chunks() -> None:
    controller = AbortController()
    chunks: list[StreamChunk] = []
    model = ScriptedModel(["a long enough answer"])
    with pytest.raises(AbortedError):
        async for chunk in model.stream(HELLO, signal=controller.signal):
            chunks.append(chunk)
            controller.abort()
    assert len(chunks) == 1


async def test_a_test_model_takes_message_dicts() -> None:
    model = ScriptedModel(["hello", "again"])
    response = await model.complete(
        [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "hi"}]
    )
    assert response.text == "hello"
    sent, _ = model.requests[0]
    assert sent == [SystemMessage(content="Be kind."), UserMessage(content="hi")]
    with pytest.raises(InvalidOptionsError, match=r"messages\[0\]: unknown role 'bot'"):
        await model.complete([{"role": "bot", "content": "x"}])

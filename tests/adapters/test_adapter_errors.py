"""Provider failures become typed errors; aborting closes the request at once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from adapter_support import KEY, make_model

from raygent import AbortController, ModelOptions, OpenAIModel, ToolSpec, UserMessage
from raygent.errors import (
    AbortedError,
    AuthenticationError,
    ContextLengthExceededError,
    InvalidRequestError,
    OfflineError,
    ProviderResponseError,
    RateLimitError,
    ServerError,
)
from raygent.models import Done, TextDelta
from raygent.sim import Fault, Latency, Match, Reply, Rule, ToolCallReply, serve

HELLO = [UserMessage(content="hello")]


def faulty(fault: Fault) -> list[Rule]:
    return [Rule(reply=Reply(text="never seen " * 20, fault=fault))]


@pytest.mark.parametrize(
    ("status", "error", "retryable"),
    [
        (400, InvalidRequestError, False),
        (403, AuthenticationError, False),
        (404, InvalidRequestError, False),
        (500, ServerError, True),
        (503, ServerError, True),
        (529, ServerError, True),
    ],
)
async def test_status_faults_map_to_typed_errors(
    provider: str, status: int, error: type[Exception], retryable: bool
) -> None:
    async with serve(faulty(Fault(kind="status", status=status))) as sim:
        model = make_model(provider, sim)
        with pytest.raises(error) as info:
            await model.complete(HELLO)
        with pytest.raises(error):
            async for _ in model.stream(HELLO):
                pass
    assert type(info.value) is error
    assert info.value.retryable is retryable
    assert info.value.status == status
    assert info.value.provider == provider.removesuffix("_responses")


async def test_rate_limit_carries_retry_after(provider: str) -> None:
    async with serve(faulty(Fault(kind="status", status=429, retry_after=7))) as sim:
        with pytest.raises(RateLimitError) as info:
            await make_model(provider, sim).complete(HELLO)
    # Bedrock sends no Retry-After: its throttles are backed off from by the access layer.
    expected = None if provider == "bedrock" else 7.0
    assert info.value.retryable and info.value.retry_after == expected


async def test_concurrency_cap_gives_rate_limit_errors(provider: str) -> None:
    async with serve(latency=Latency(fixed_ms=300), max_concurrency=4, retry_after=2) as sim:
        model = make_model(provider, sim)
        results = await asyncio.gather(
            *(model.complete(HELLO) for _ in range(10)), return_exceptions=True
        )
    limited = [r for r in results if isinstance(r, RateLimitError)]
    assert len(limited) == 6
    expected = None if provider == "bedrock" else 2.0  # Bedrock sends no Retry-After
    assert all(r.retry_after == expected for r in limited)


async def test_wrong_key_is_an_auth_error_without_the_key(provider: str) -> None:
    async with serve(api_key="sk-the-right-key-999") as sim:
        wrong = "sk-wrong-key-1234567890"
        with pytest.raises(AuthenticationError) as info:
            await make_model(provider, sim, api_key=wrong).complete(HELLO)
        ok = await make_model(provider, sim, api_key="sk-the-right-key-999").complete(HELLO)
    assert ok.text
    for text in (str(info.value), repr(info.value), repr(info.value.to_dict())):
        assert wrong not in text and "sk-the-right-key-999" not in text


async def test_context_window_exceeded(provider: str) -> None:
    async with serve(context_window=50) as sim:
        model = make_model(provider, sim)
        with pytest.raises(ContextLengthExceededError) as info:
            await model.complete([UserMessage(content="word " * 400)])
        assert not info.value.retryable
        assert (await model.complete(HELLO)).text


@pytest.mark.parametrize("kind", ["not_json", "empty_choices"])
async def test_unreadable_replies_are_typed(provider: str, kind: str) -> None:
    async with serve(faulty(Fault(kind=kind))) as sim:  # type: ignore[arg-type]
        model = make_model(provider, sim)
        if kind == "empty_choices" and provider not in ("openai", "gemini"):
            # An empty content list is a valid (empty) Anthropic reply; so is an empty
            # output list in the Responses API.
            assert (await model.complete(HELLO)).text == ""
            return
        with pytest.raises(ProviderResponseError):
            await model.complete(HELLO)


async def test_truncated_stream_is_a_typed_error(provider: str) -> None:
    async with serve(faulty(Fault(kind="truncate", after_chunks=3))) as sim:
        model = make_model(provider, sim)
        seen: list[Any] = []
        with pytest.raises(ProviderResponseError) as info:
            async for chunk in model.stream(HELLO):
                seen.append(chunk)
    assert info.value.retryable
    assert not any(isinstance(c, Done) for c in seen)


async def test_truncated_body_is_a_typed_error(provider: str) -> None:
    async with serve(faulty(Fault(kind="truncate"))) as sim:
        with pytest.raises(ProviderResponseError):
            await make_model(provider, sim).complete(HELLO)


async def test_malformed_tool_arguments_arrive_unparsed(provider: str) -> None:
    script = [
        Rule(
            reply=Reply(
                tool_calls=[ToolCallReply("search", {"q": "x"})],
                fault=Fault(kind="malformed_tool_args"),
            )
        )
    ]
    options = ModelOptions(tools=(ToolSpec(name="search"),))
    async with serve(script) as sim:
        model = make_model(provider, sim)
        if provider == "gemini":  # Gemini parses calls itself: MALFORMED_FUNCTION_CALL
            with pytest.raises(ProviderResponseError, match="MALFORMED_FUNCTION_CALL"):
                await model.complete(HELLO, options)
            with pytest.raises(ProviderResponseError, match="MALFORMED_FUNCTION_CALL"):
                _ = [c async for c in model.stream(HELLO, options)]
            return
        for reply in [
            await model.complete(HELLO, options),
            [c async for c in model.stream(HELLO, options)][-1].response,
        ]:
            [call] = reply.tool_calls
            assert call.name == "search" and call.arguments is None
            assert call.arguments_text


async def test_refusal_is_a_finish_reason(provider: str) -> None:
    async with serve([Rule(reply=Reply(refusal="I can't help with that."))]) as sim:
        model = make_model(provider, sim)
        reply = await model.complete(HELLO)
        streamed = [c async for c in model.stream(HELLO)][-1].response
    if provider == "gemini":  # Gemini has no refusal: the model says so in its text
        assert reply.finish_reason == streamed.finish_reason == "stop" and reply.text
        return
    assert reply.finish_reason == streamed.finish_reason == "refusal"


async def test_length_cut_off_keeps_partial_text_and_truncated_call(provider: str) -> None:
    script = [
        Rule(match=Match(last_user="essay"), reply=Reply(text="word " * 200)),
        Rule(reply=Reply(tool_calls=[ToolCallReply("search", {"q": "x" * 400})])),
    ]
    options = ModelOptions(max_tokens=20, tools=(ToolSpec(name="search"),))
    async with serve(script) as sim:
        model = make_model(provider, sim)
        essay = await model.complete([UserMessage(content="an essay")], options)
        if provider == "gemini":  # Gemini cuts a call it cannot finish: MALFORMED_FUNCTION_CALL
            with pytest.raises(ProviderResponseError, match="MALFORMED_FUNCTION_CALL"):
                await model.complete(HELLO, options)
            assert essay.finish_reason == "length" and 0 < len(essay.text) < len("word " * 200)
            return
        call = await model.complete(HELLO, options)
    assert essay.finish_reason == "length"
    assert 0 < len(essay.text) < len("word " * 200)
    assert call.finish_reason == "length"
    assert [c.arguments for c in call.tool_calls] == [None]


async def test_abort_mid_stream_closes_the_request(provider: str) -> None:
    async with serve(
        [Rule(reply=Reply(text="tick " * 400))], latency=Latency(per_token_ms=5)
    ) as sim:
        controller = AbortController()
        seen = 0
        with pytest.raises(AbortedError):
            async for chunk in make_model(provider, sim).stream(HELLO, signal=controller.signal):
                if isinstance(chunk, TextDelta):
                    seen += 1
                    if seen == 3:
                        controller.abort("enough")
        await sim.wait_until(lambda s: s.disconnects == 1)
        assert sim.stats().in_flight == 0


async def test_abort_while_waiting_for_a_reply(provider: str) -> None:
    async with serve(faulty(Fault(kind="hang"))) as sim:
        controller = AbortController()
        task = asyncio.create_task(
            make_model(provider, sim).complete(HELLO, signal=controller.signal)
        )
        await sim.wait_until(lambda s: s.in_flight == 1)
        started = time.monotonic()
        controller.abort("user")
        with pytest.raises(AbortedError):
            await task
        assert time.monotonic() - started < 1.0
        await sim.wait_until(lambda s: s.disconnects == 1)


async def test_cancelling_the_task_closes_the_request(provider: str) -> None:
    async with serve(faulty(Fault(kind="hang", after_chunks=2))) as sim:

        async def consume() -> None:
            async for _ in make_model(provider, sim).stream(HELLO):
                pass

        task = asyncio.create_task(consume())
        await sim.wait_until(lambda s: s.in_flight == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await sim.wait_until(lambda s: s.disconnects == 1)


async def test_offline_guard_refuses_real_providers() -> None:
    model = OpenAIModel("gpt-4o-mini", api_key=KEY)
    with pytest.raises(OfflineError):
        await model.complete(HELLO)

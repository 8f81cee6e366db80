"""fallback_model: fail over on transient errors, count every attempt, record them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest
from agent_support import City, StreamOnlyModel, drain, make_model, outcome

import raygent
from raygent import AbortSignal, Capabilities, ModelOptions, Pricing
from raygent.errors import (
    AuthenticationError,
    ProviderConnectionError,
    ProviderTimeoutError,
    RateLimitError,
    ServerError,
)
from raygent.messages import Message
from raygent.models.contract import StreamChunk, TextDelta
from raygent.sim import Fault, Latency, Match, Reply, Rule, serve
from raygent.testing import ScriptedModel

PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=2.0)


def _rate_limited() -> RateLimitError:
    return RateLimitError("slow down", provider="test", status=429, retry_after=1.0)


@pytest.mark.parametrize(
    "error",
    [
        _rate_limited(),
        ProviderTimeoutError("timeout", provider="test"),
        ProviderConnectionError("reset", provider="test"),
        ServerError("overloaded", provider="test", status=529),
    ],
)
async def test_transient_errors_fail_over_to_the_next_model(error: Exception) -> None:
    first = ScriptedModel([error], name="first", pricing=PRICING)
    second = ScriptedModel(["from second"], name="second", pricing=PRICING)
    bot = raygent.agent(model=raygent.fallback_model([first, second]))
    result = await bot.execute("hi")
    assert result.ok and result.text == "from second"
    [trip] = result.report.trips
    [attempt] = trip.attempts
    assert attempt["model"] == "first" and attempt["provider"] == "test"
    assert attempt["error"]["code"] == type(error).code  # type: ignore[attr-defined]
    # The failed attempt is a request, at no cost; the answer's usage is all there.
    messages, options = second.requests[0]
    replay = ScriptedModel(["from second"], name="second", pricing=PRICING)
    answer = (await replay.complete(messages, options)).usage
    assert result.usage.requests == 2
    assert result.usage.output_tokens == answer.output_tokens
    assert result.usage.input_tokens == answer.input_tokens
    assert result.usage.cost is not None and answer.cost is not None
    assert result.usage.cost.total == pytest.approx(answer.cost.total)


async def test_other_errors_do_not_fail_over() -> None:
    first = ScriptedModel([AuthenticationError("bad key", provider="test", status=401)])
    second = ScriptedModel(["never"])
    result = await raygent.agent(model=raygent.fallback_model([first, second])).execute("hi")
    assert isinstance(result.error, AuthenticationError)
    assert second.requests == []


async def test_when_every_model_fails_the_last_error_is_the_run_s() -> None:
    models = [ScriptedModel([_rate_limited()]), ScriptedModel([ServerError("down", provider="x")])]
    result = await raygent.agent(model=raygent.fallback_model(models)).execute("hi")
    assert isinstance(result.error, ServerError)


async def test_retry_on_chooses_what_fails_over() -> None:
    auth = AuthenticationError("bad key", provider="test", status=401)
    by_type = raygent.fallback_model(
        [ScriptedModel([auth]), ScriptedModel(["ok"])], retry_on=(AuthenticationError,)
    )
    assert (await raygent.agent(model=by_type).execute("hi")).text == "ok"
    never = raygent.fallback_model(
        [ScriptedModel([_rate_limited()]), ScriptedModel(["ok"])], retry_on=lambda e: False
    )
    assert isinstance((await raygent.agent(model=never).execute("hi")).error, RateLimitError)


async def test_the_fallback_can_do_only_what_every_model_can() -> None:
    plain = ScriptedModel(
        ['{"name": "Oslo", "population": 1}'], capabilities=Capabilities(structured_output=False)
    )
    native = ScriptedModel(['{"name": "Oslo", "population": 1}'])
    fallback = raygent.fallback_model([native, plain])
    assert fallback.capabilities.structured_output is False
    result = await raygent.agent(model=fallback, output=City).execute("Oslo?")
    assert result.data == City(name="Oslo", population=1)
    _, options = native.requests[0]
    assert options.response_schema is None


class BreaksMidStream(StreamOnlyModel):
    """Streams one delta, then fails with a transient error."""

    name = "breaks"

    async def stream(
        self,
        messages: Sequence[Message],
        options: ModelOptions | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> AsyncIterator[StreamChunk]:
        yield TextDelta("partial ")
        raise ServerError("dropped mid-stream", provider=self.provider)


async def test_a_stream_fails_over_only_before_its_first_chunk() -> None:
    second = ScriptedModel(["second"])
    before = raygent.fallback_model([ScriptedModel([_rate_limited()]), second])
    events, result = await drain(raygent.agent(model=before).stream("hi"))
    assert result.ok and result.text == "second"
    assert result.report.trips[0].attempts[0]["error"]["code"] == "PROVIDER_RATE_LIMITED"
    after = raygent.fallback_model([BreaksMidStream(), ScriptedModel(["never"])])
    events, result = await drain(raygent.agent(model=after).stream("hi"))
    assert isinstance(result.error, ServerError)
    streamed = "".join(e.text for e in events if e.type == "agent.trip.streaming")
    assert streamed == "partial "


async def test_stream_and_execute_agree_with_a_fallback() -> None:
    def make() -> raygent.Agent:
        models = [
            ScriptedModel([_rate_limited()], pricing=PRICING),
            ScriptedModel(["ok"], pricing=PRICING),
        ]
        return raygent.agent(model=raygent.fallback_model(models))

    executed = await make().execute("hi")
    _, streamed = await drain(make().stream("hi"))
    assert outcome(streamed) == outcome(executed)
    assert streamed.report.trips[0].attempts == executed.report.trips[0].attempts


async def test_fails_over_between_simulated_providers() -> None:
    # A 429 with a model to fall back on fails over at once on both backends: a Ray
    # gateway does not retry it first (it does for the last model of the chain).
    busy = Fault(kind="status", status=429)
    script = [
        Rule(match=Match(model="primary"), reply=Reply(fault=busy)),
        Rule(match=Match(model="backup"), reply=Reply(text="backup answered")),
    ]
    async with serve(script) as sim:
        primary = raygent.OpenAIModel("primary", base_url=sim.openai_base_url, api_key="sk-x1234")
        backup = raygent.AnthropicModel("backup", base_url=sim.anthropic_base_url, api_key="k")
        bot = raygent.agent(model=raygent.fallback_model([primary, backup]))
        result = await bot.execute("hi")
        events, streamed = await drain(bot.stream("hi"))
        stats = sim.stats()
    assert stats.by_status[429] == 2  # one per run: the primary was not retried
    assert events[-1].type == "agent.completed"
    assert result.ok and result.text == "backup answered"
    assert streamed.ok and streamed.text == "backup answered"
    for run in (result, streamed):
        [attempt] = run.report.trips[0].attempts
        assert (attempt["model"], attempt["error"]["status"]) == ("primary", 429)
        assert run.usage.requests == 2


async def test_a_fallback_holds_each_model_s_concurrency_bound() -> None:
    async with serve(latency=Latency(fixed_ms=30)) as sim:
        bounded = make_model("openai", sim, max_concurrency=2)
        bot = raygent.agent(model=raygent.fallback_model([bounded]))
        results = await asyncio.gather(*(bot.execute(f"q{i}") for i in range(6)))
        stats = sim.stats()
    assert all(r.ok for r in results)
    assert stats.peak_in_flight <= 2


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_fallback_fails_over_at_once_and_its_last_models_429s_are_sent_again(
    streamed: bool,
) -> None:
    """One access layer on both backends: the first model's 429 goes back at once (its
    route fails fast: the fallback is what it leads to), the last model's are waited out
    and sent again; each is counted on the trip, once."""
    busy = Fault(kind="status", status=429, retry_after=0.05)
    script = [
        Rule(match=Match(model="primary"), reply=Reply(fault=busy)),
        Rule(match=Match(model="backup"), reply=Reply(fault=busy), times=2),
        Rule(match=Match(model="backup"), reply=Reply(text="backup answered")),
    ]
    async with serve(script) as sim:
        primary = raygent.OpenAIModel("primary", base_url=sim.openai_base_url, api_key="sk-p1")
        backup = raygent.OpenAIModel("backup", base_url=sim.openai_base_url, api_key="sk-b2")
        bot = raygent.agent(model=raygent.fallback_model([primary, backup]))
        result = (await drain(bot.stream("hi")))[1] if streamed else await bot.execute("hi")
        stats = await sim.wait_until(lambda s: s.by_status.get(200) == 1, 10)
    assert result.ok and result.text == "backup answered", result.error
    assert stats.by_status == {429: 3, 200: 1}  # the primary once, the backup thrice
    [trip] = result.report.trips
    assert trip.throttled == 3
    # The primary's failure as a fallback lists it; then the backup's sends, the last
    # one answered.
    failed, *sends = trip.attempts
    assert failed["model"] == "primary" and failed["error"]["status"] == 429
    assert [(a["model"], a["status"], a["ok"]) for a in sends] == [
        ("backup", 429, False),
        ("backup", 429, False),
        ("backup", None, True),
    ]
    assert result.usage.requests == 4  # three 429s billed at nothing, and the answer

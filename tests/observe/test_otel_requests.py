"""Telemetry is emitted once per request, on both backends: a plain or streamed request,
one answered after 429s, a fallback's failed attempt, a tier's refusal, a reply from the
response cache, a line of a provider batch, and a batch's runs crossing from Ray's
runners to the driver. Each test counts the spans and metric points of the requests it
made, with the real OpenTelemetry SDK (in-memory exporter and metric reader)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from otel_support import DURATION, TOKENS, Telemetry, attributes

import raygent
from raygent import AgentResult, OpenAIModel, Pricing, RateLimit
from raygent.sim import Fault, Match, Reply, Rule, ServiceTiers, ToolCallReply, serve

PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=2.0)
QUICK = raygent.ProviderBatch(gather_seconds=0.1, poll_seconds=0.02)
TOOL_ROUND = [
    Rule(match=Match(after_tool_result=True), reply=Reply(text="answered")),
    Rule(reply=Reply(tool_calls=[ToolCallReply("lookup", {"q": "x"})])),
]


@raygent.tool
def lookup(q: str) -> str:
    """Look a question up."""
    return "found " + q


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    kept = Telemetry()
    yield kept
    kept.close()


def _model(sim: Any, name: str = "sim-gpt", **settings: Any) -> OpenAIModel:
    settings.setdefault("pricing", PRICING)
    return OpenAIModel(name, base_url=sim.openai_base_url, api_key="sk-telemetry", **settings)


async def _run(agent: raygent.Agent, text: str, streamed: bool, **options: Any) -> AgentResult:
    if not streamed:
        return await agent.execute(text, **options)
    stream = agent.stream(text, **options)
    async for _ in stream:
        pass
    return await stream.result


def _tokens_match(telemetry: Telemetry, usage: raygent.Usage) -> None:
    """The token histogram's sums are the usage's, per token type."""
    inputs = telemetry.total(TOKENS, {"gen_ai.token.type": "input"})
    outputs = telemetry.total(TOKENS, {"gen_ai.token.type": "output"})
    assert (inputs, outputs) == (usage.total_input_tokens, usage.output_tokens)


@pytest.mark.parametrize("streamed", [False, True], ids=["execute", "stream"])
async def test_each_request_is_one_span_one_duration_and_two_token_points(
    backend_kind: str, telemetry: Telemetry, streamed: bool
) -> None:
    async with serve(TOOL_ROUND) as sim:
        agent = raygent.agent("asker", model=_model(sim), tools=[lookup])
        result = await _run(agent, "q?", streamed, observe=telemetry.otel)
    assert result.ok, result.error
    chats = telemetry.chats()
    assert len(chats) == len(result.report.trips) == 2
    assert telemetry.count(DURATION) == 2
    assert telemetry.count(TOKENS) == 4  # input and output, per request
    _tokens_match(telemetry, result.usage)
    assert result.usage.cost is not None
    assert telemetry.total("raygent.client.cost") == pytest.approx(result.usage.cost.total)
    first = attributes(chats[0])
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.provider.name"] == "openai"
    assert first["gen_ai.request.model"] == "sim-gpt"
    assert first["gen_ai.response.model"] == result.report.trips[0].response_model
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert first["raygent.route"] == "online"
    # The durations are the trips', point for point.
    durations = sorted(t.timing.duration or 0.0 for t in result.report.trips)
    assert telemetry.total(DURATION) == pytest.approx(sum(durations))
    (point,) = telemetry.points(DURATION)
    assert point.attributes["gen_ai.request.model"] == "sim-gpt"
    assert "error.type" not in point.attributes


async def test_a_request_that_met_a_429_is_counted_once(
    backend_kind: str, telemetry: Telemetry
) -> None:
    busy = Fault(kind="status", status=429, retry_after=0.05)
    script = [Rule(reply=Reply(fault=busy), times=1), Rule(reply=Reply(text="fine"))]
    async with serve(script) as sim:
        model = _model(sim, rate_limit=RateLimit(requests_per_minute=6000))
        result = await raygent.agent(model=model).execute("hi", observe=telemetry.otel)
        sent = sim.stats().requests
    (chat,) = telemetry.chats()
    assert telemetry.total("raygent.client.throttled") == 1 == result.report.trips[0].throttled
    assert attributes(chat)["raygent.throttled"] == 1
    assert telemetry.count(DURATION) == 1
    # The access layer sends it again after the Retry-After, on both backends.
    assert result.ok and sent == 2 and result.usage.requests == 2
    assert [e.attributes["error.type"] for e in chat.events] == ["PROVIDER_RATE_LIMITED"]
    assert telemetry.count(TOKENS) == 2
    _tokens_match(telemetry, result.usage)


async def test_a_fallbacks_failed_attempt_is_counted_once_inside_its_request(
    backend_kind: str, telemetry: Telemetry
) -> None:
    down = Fault(kind="status", status=503)
    script = [
        Rule(match=Match(model="^primary$"), reply=Reply(fault=down)),
        Rule(reply=Reply(text="backup answered")),
    ]
    async with serve(script) as sim:
        model = raygent.fallback_model([_model(sim, "primary"), _model(sim, "backup")])
        result = await raygent.agent(model=model).execute("hi", observe=telemetry.otel)
    assert result.ok, result.error
    assert result.usage.requests == 2  # the failed attempt is a request, billed at nothing
    (chat,) = telemetry.chats()
    (event,) = chat.events
    assert event.name == "raygent.attempt.failed"
    assert event.attributes == {
        "gen_ai.request.model": "primary",
        "gen_ai.provider.name": "openai",
        "error.type": "PROVIDER_SERVER_ERROR",
        "raygent.fallback": "model",
    }
    assert attributes(chat)["gen_ai.response.model"] == "backup"
    failed = {"error.type": "PROVIDER_SERVER_ERROR", "gen_ai.request.model": "primary"}
    assert telemetry.total("raygent.client.failed_attempts", failed) == 1
    assert telemetry.count(DURATION) == 1
    assert telemetry.count(DURATION, {"gen_ai.response.model": "backup"}) == 1
    assert telemetry.count(TOKENS) == 2
    _tokens_match(telemetry, result.usage)


@pytest.mark.parametrize("streamed", [False, True], ids=["execute", "stream"])
async def test_a_tiers_refusal_is_counted_once_inside_its_request(
    backend_kind: str, telemetry: Telemetry, streamed: bool
) -> None:
    tier = raygent.Tier("flex", fallback="default")
    with serve([Rule(reply=Reply(text="fine"))], tiers=ServiceTiers(flex_refusal_rate=1.0)) as sim:
        agent = raygent.agent(model=_model(sim, service_tier=tier))
        result = await _run(agent, "hi", streamed, observe=telemetry.otel)
    assert result.ok, result.error
    (chat,) = telemetry.chats()
    seen = attributes(chat)
    assert seen["openai.request.service_tier"] == "flex"
    assert seen["openai.response.service_tier"] == "default"
    assert seen["raygent.tier_fallbacks"] == 1 == result.report.tier_fallbacks
    assert [e.attributes["raygent.fallback"] for e in chat.events] == ["tier"]
    assert telemetry.total("raygent.client.failed_attempts", {"raygent.fallback": "tier"}) == 1
    assert telemetry.count(DURATION, {"openai.response.service_tier": "default"}) == 1
    assert telemetry.count(TOKENS) == 2
    _tokens_match(telemetry, result.usage)


async def test_a_reply_from_the_cache_is_a_span_and_a_hit_never_tokens_used(
    backend_kind: str, telemetry: Telemetry
) -> None:
    async with serve([Rule(reply=Reply(text="fine"))]) as sim:
        agent = raygent.agent(model=_model(sim), cache=raygent.ResponseCache())
        paid = await agent.execute("hi", observe=telemetry.otel)
        hit = await agent.execute("hi", observe=telemetry.otel)
        sent = sim.stats().requests
    assert paid.ok and hit.ok and sent == 1
    assert hit.report.trips[0].cache == "hit"
    missed, served = telemetry.chats()
    assert attributes(missed)["raygent.cache"] == "miss"
    assert attributes(served)["raygent.cache"] == "hit"
    assert attributes(served)["raygent.cache.saved_usd"] == pytest.approx(hit.report.saved)
    assert telemetry.total("raygent.client.cache.hits") == 1
    assert telemetry.count(DURATION) == 1  # the paid request's alone
    assert telemetry.count(TOKENS) == 2
    _tokens_match(telemetry, paid.usage)
    assert paid.usage.cost is not None
    assert telemetry.total("raygent.client.cost") == pytest.approx(paid.usage.cost.total)


@pytest.mark.parametrize("route", ["online", "batch"])
async def test_a_jobs_runs_are_counted_once_each_time_it_runs(
    backend_kind: str, telemetry: Telemetry, route: str
) -> None:
    """On Ray the runs are made in the runners and their reports cross to the driver,
    whose registered observers see each once; run twice, the job counts twice."""
    items = [f"q{i}" for i in range(6)]
    options: dict[str, Any] = {"progress": False}
    if route == "batch":
        options["provider_batch"] = QUICK
    async with serve(TOOL_ROUND) as sim:
        agent = raygent.agent("asker", model=_model(sim), tools=[lookup])
        with raygent.observers.add(telemetry.otel), raygent.observers.observe_all(True):
            first = await raygent.batch(agent, items, **options)
            second = await raygent.batch(agent, items, **options)
    for result in (first, second):
        assert result.ok, result.report.errors
    trips = 2 * len(items) * 2  # two trips an item, two runs of the job
    assert len(telemetry.spans("invoke_agent ")) == 2 * len(items)
    chats = telemetry.chats()
    assert len(chats) == trips
    assert {attributes(s)["raygent.route"] for s in chats} == {route}
    assert telemetry.count(DURATION, {"raygent.route": route}) == trips
    assert telemetry.count(TOKENS) == 2 * trips
    _tokens_match(telemetry, first.usage + second.usage)
    if route == "batch":
        assert all(attributes(s)["raygent.provider_batch"] for s in chats)

"""A fallback model with a response cache (issue #36, point 3; issue #44, point 8), on
both backends: each model's reply is kept under its own key, a hit reserves nothing and
costs nothing, a fallback's 429 still fails over at once through the cache (Ray's gateway
does not retry it first), and every model's reply is looked up before any model is sent
to: a warm cache sends nothing to a first model that is down."""

from __future__ import annotations

from typing import Any

import pytest
from cache_support import KEY, PRICING, WEATHER, get_weather

import raygent
from raygent import AnthropicModel, Budget, OpenAIModel
from raygent.sim import Fault, Match, Reply, Rule, serve

ITEMS = 50
TRIPS = 2  # each item: a tool call, then the answer


def questions(count: int) -> list[str]:
    return [f"What is the weather? ({i})" for i in range(count)]


def _fallback(sim: Any, first: str = "primary", second: str = "backup") -> Any:
    primary = OpenAIModel(first, base_url=sim.openai_base_url, api_key=KEY, pricing=PRICING)
    backup = AnthropicModel(second, base_url=sim.anthropic_base_url, api_key=KEY, pricing=PRICING)
    return raygent.fallback_model([primary, backup])


@pytest.mark.across_processes
@pytest.mark.kinds("memory", "redis")
async def test_a_fallback_job_run_twice_sends_nothing_the_second_time(
    backend_kind: str, cache_kind: str, make_cache: Any
) -> None:
    cache = make_cache()
    async with serve(WEATHER) as sim:
        bot = raygent.agent(model=_fallback(sim), tools=[get_weather])
        first = await raygent.batch(bot, questions(ITEMS), concurrency=16, cache=cache)
        paid = sim.stats().requests
        # A hit reserves nothing: a budget that no request would fit in binds nothing.
        second = await raygent.batch(
            bot, questions(ITEMS), concurrency=16, cache=cache, budget=Budget(usd=1e-12)
        )
        again = sim.stats().requests - paid
    assert first.ok and second.ok, second.report.errors
    assert paid == ITEMS * TRIPS
    assert again == 0
    assert second.data == first.data
    assert second.report.cache_hits == ITEMS * TRIPS
    assert second.usage.cost is not None and second.usage.cost.total == 0
    assert second.report.budget is not None and second.report.budget.spent.usd == 0


DOWN = [
    Rule(match=Match(model="primary"), reply=Reply(fault=Fault(kind="status", status=429))),
    Rule(reply=Reply(text="backup answered")),
]


@pytest.mark.kinds("memory")
@pytest.mark.parametrize("streamed", [False, True], ids=["execute", "stream"])
async def test_a_hit_on_the_second_model_sends_nothing_to_the_first_that_is_down(
    backend_kind: str, cache_kind: str, make_cache: Any, streamed: bool
) -> None:
    cache = make_cache()
    async with serve(DOWN) as sim:
        bot = raygent.agent(model=_fallback(sim), cache=cache)
        first = await _run(bot, "hi", streamed)
        # (A stream's 200 is counted when the simulator has finished sending it.)
        after_first = await sim.wait_until(lambda s: s.in_flight == 0)
        second = await _run(bot, "hi", streamed)
        stats = await sim.wait_until(lambda s: s.in_flight == 0)
    assert first.ok and second.ok and second.text == "backup answered"
    # The first run asked the primary once (a 429, not retried: it failed over at once)
    # and the backup once; the second found the backup's reply before asking anyone.
    assert after_first.by_status.get(429) == 1 and after_first.by_status.get(200) == 1
    assert stats.requests == after_first.requests
    trip = second.report.trips[0]
    assert trip.cache == "hit" and trip.attempts == []
    assert second.usage.requests == 0 and second.usage.cost is not None
    assert second.usage.cost.total == 0
    [attempt] = first.report.trips[0].attempts
    assert (attempt["model"], attempt["error"]["status"]) == ("primary", 429)
    assert first.report.trips[0].cache == "miss"


@pytest.mark.kinds("memory")
async def test_the_first_model_s_own_reply_is_found_first(
    backend_kind: str, cache_kind: str, make_cache: Any
) -> None:
    # Both models' replies are kept: the fallback's order decides which answers.
    cache = make_cache()
    script = [
        Rule(match=Match(model="primary"), reply=Reply(text="primary answered")),
        Rule(reply=Reply(text="backup answered")),
    ]
    async with serve(script) as sim:
        backup_only = raygent.agent(model=_fallback(sim, first="backup"), cache=cache)
        assert (await backup_only.execute("hi")).text == "backup answered"
        bot = raygent.agent(model=_fallback(sim), cache=cache)
        assert (await bot.execute("hi")).text == "primary answered"
        paid = sim.stats().requests
        again = await bot.execute("hi")
        assert sim.stats().requests == paid
    assert again.text == "primary answered" and again.report.trips[0].cache == "hit"


@pytest.mark.across_processes
@pytest.mark.kinds("memory", "redis")
async def test_a_fallback_job_with_its_first_model_down_sends_nothing_the_second_time(
    backend_kind: str, cache_kind: str, make_cache: Any
) -> None:
    cache = make_cache()
    # Fewer items: each primary's 429 pauses its key for a second (no Retry-After), so
    # the first job's items ask it a few at a time.
    items = 16
    async with serve(DOWN) as sim:
        bot = raygent.agent(model=_fallback(sim), cache=cache)
        first = await raygent.batch(bot, questions(items), concurrency=8, cache=cache)
        paid = sim.stats()
        second = await raygent.batch(bot, questions(items), concurrency=8, cache=cache)
        again = sim.stats()
    assert first.ok and second.ok, second.report.errors
    # The first job: each item asked the primary (429) and then the backup.
    assert paid.by_status.get(429) == items and paid.by_status.get(200) == items
    assert again.requests == paid.requests  # neither model was asked again
    assert second.report.cache_hits == items and second.usage.requests == 0
    assert second.data == first.data


async def _run(bot: Any, text: str, streamed: bool) -> Any:
    if not streamed:
        return await bot.execute(text)
    stream = bot.stream(text)
    async for _ in stream:
        pass
    return await stream.result

"""A fallback model with a response cache (issue #36, point 3), on both backends: each
model's reply is kept under its own key, a hit reserves nothing and costs nothing, and a
fallback's 429 still fails over at once through the cache (Ray's gateway does not retry
it first)."""

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


@pytest.mark.kinds("memory")
async def test_a_hit_on_the_second_model_of_a_fallback_when_the_first_is_down(
    backend_kind: str, cache_kind: str, make_cache: Any
) -> None:
    cache = make_cache()
    script = [
        Rule(match=Match(model="primary"), reply=Reply(fault=Fault(kind="status", status=429))),
        Rule(reply=Reply(text="backup answered")),
    ]
    async with serve(script) as sim:
        bot = raygent.agent(model=_fallback(sim), cache=cache)
        first = await bot.execute("hi")
        after_first = sim.stats()
        second = await bot.execute("hi")
        stats = sim.stats()
    assert first.ok and second.ok and second.text == "backup answered"
    # Each run asked the primary once (a 429, not retried: it fails over at once); the
    # backup's reply was sent once, then found under the backup's own key.
    assert after_first.by_status.get(429) == 1 and after_first.by_status.get(200) == 1
    assert stats.by_status.get(429) == 2 and stats.by_status.get(200) == 1
    trip = second.report.trips[0]
    assert trip.cache == "hit"
    [attempt] = trip.attempts
    assert (attempt["model"], attempt["error"]["status"]) == ("primary", 429)
    assert first.report.trips[0].cache == "miss"

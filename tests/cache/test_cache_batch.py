"""A batch with a response cache, on every store and both backends: run twice, the
second run sends nothing and answers the same; a batch that stopped part-way pays, run
again, only for what it had not received."""

from __future__ import annotations

from typing import Any

import pytest
from cache_support import WEATHER, get_weather, make_model

import raygent
from raygent.sim import serve
from raygent.stores import RedisStore

ITEMS = 1000
TRIPS = 2  # each item: a tool call, then the answer


def questions(count: int) -> list[str]:
    return [f"What is the weather? ({i})" for i in range(count)]


@pytest.mark.across_processes
async def test_a_batch_run_twice_sends_nothing_the_second_time(
    backend_kind: str, cache_kind: str, make_cache: Any
) -> None:
    cache = make_cache()
    async with serve(WEATHER) as sim:
        bot = raygent.agent(model=make_model("openai", sim), tools=[get_weather])
        first = await raygent.batch(bot, questions(ITEMS), concurrency=64, cache=cache)
        paid = sim.stats().requests
        second = await raygent.batch(bot, questions(ITEMS), concurrency=64, cache=cache)
        again = sim.stats().requests - paid
    assert first.ok and second.ok
    assert paid == ITEMS * TRIPS
    assert again == 0
    assert second.data == first.data
    assert all(text == "Sunny in Paris and Oslo." for text in second.data)
    # A hit's usage counts the tokens the reply cost when it was paid, at no cost.
    assert second.usage.input_tokens == first.usage.input_tokens
    assert second.usage.output_tokens == first.usage.output_tokens
    assert first.usage.cost is not None and first.usage.cost.total > 0
    assert second.usage.cost is not None and second.usage.cost.total == 0
    assert second.usage.requests == 0 and first.usage.requests == ITEMS * TRIPS
    # The batch's report: every trip a hit, and what they cost when paid.
    assert (first.report.cache_hits, first.report.saved) == (0, 0.0)
    assert second.report.cache_hits == ITEMS * TRIPS
    assert second.report.saved == pytest.approx(first.usage.cost.total)


@pytest.mark.kinds("sqlite")
async def test_a_batch_run_again_pays_only_for_what_it_had_not_received(
    backend_kind: str, cache_kind: str, make_cache: Any
) -> None:
    cache = make_cache()
    async with serve(WEATHER) as sim:
        bot = raygent.agent(model=make_model("openai", sim), tools=[get_weather])
        part = await raygent.batch(bot, questions(300), concurrency=32, cache=cache)
        paid = sim.stats().requests
        whole = await raygent.batch(bot, questions(500), concurrency=32, cache=cache)
        more = sim.stats().requests - paid
    assert part.ok and whole.ok
    assert paid == 300 * TRIPS
    assert more == 200 * TRIPS  # the 300 received before are answered by the cache
    assert whole.data == ["Sunny in Paris and Oslo."] * 500


@pytest.mark.kinds("memory")
async def test_an_item_whose_second_trip_failed_pays_only_that_trip_again(
    cache_kind: str, make_cache: Any
) -> None:
    from raygent.sim import Fault, Match, Reply, Rule

    failing = [
        Rule(
            match=Match(after_tool_result=True),
            reply=Reply(fault=Fault(kind="status", status=400)),
            times=1,
        ),
        *WEATHER,
    ]
    cache = make_cache()
    async with serve(failing) as sim:
        bot = raygent.agent(model=make_model("openai", sim), tools=[get_weather], cache=cache)
        failed = await bot.execute("What is the weather?")
        paid = sim.stats().requests
        done = await bot.execute("What is the weather?")
        more = sim.stats().requests - paid
    assert not failed.ok and paid == 2
    assert done.ok and more == 1  # the tool-call trip came from the cache
    assert [t.cache for t in done.report.trips] == ["hit", "miss"]


async def test_a_dead_store_is_counted_per_trip_wherever_the_runs_ran(
    backend_kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    # On Ray the runs (and their copies of the cache) are in the runners: the count
    # reaches the driver's report on each trip, not from the driver's own copy. (The
    # job's check would refuse the dead store up front: here it is dead during the runs.)
    cache = raygent.ResponseCache(RedisStore("redis://127.0.0.1:1/0"))
    async with serve(WEATHER) as sim:
        bot = raygent.agent(model=make_model("openai", sim), tools=[get_weather])
        result = await raygent.batch(bot, questions(6), concurrency=3, cache=cache, check=False)
        sent = sim.stats().requests
    assert result.ok, result.report.errors
    assert sent == 6 * TRIPS  # a cache that fails never fails a run
    assert result.report.cache_errors == 6 * TRIPS
    assert result.report.cache_hits == 0
    trips = [trip for item in result.items for trip in item.result.report.trips]
    assert {trip.cache for trip in trips} == {"unavailable"}
    if backend_kind == "local":  # (the runners' logs are theirs)
        assert sum("response cache:" in r.getMessage() for r in caplog.records) == 1

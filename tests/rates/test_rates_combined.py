"""A rate limit with the features it meets on the request path: the response cache (a
hit sends nothing, so it waits for no rate and takes none), a budget (it still binds,
and a request it refuses takes no rate), and a fallback (each model's rate is its own)."""

from __future__ import annotations

from pathlib import Path

from rates_support import KEY, make_model

import raygent
from raygent import Budget, OpenAIModel, Pricing, RateLimit, ResponseCache
from raygent.sim import Fault, Match, Reply, Rule, SimRateLimits, serve
from raygent.stores import SQLiteStore

PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=2.0)
ITEMS = 30
# The provider's limit, each model its own bucket; a burst of 30 lets the failing first
# model's requests all in, so what the second model meets is its own limit.
LIMITS = SimRateLimits(requests_per_minute=600, burst_seconds=3)


async def test_a_cached_job_run_again_sends_nothing_and_waits_for_no_rate(
    tmp_path: Path,
) -> None:
    questions = [f"q{i}" for i in range(ITEMS)]
    async with serve(rate_limits=SimRateLimits(requests_per_minute=600)) as sim:
        model = make_model(
            "openai", sim, rate_limit=RateLimit(requests_per_minute=540), pricing=PRICING
        )
        bot = raygent.agent(model=model, cache=ResponseCache(SQLiteStore(tmp_path / "c.db")))
        first = await raygent.batch(bot, questions, concurrency=ITEMS, progress=False)
        sent = sim.stats().requests
        again = await raygent.batch(bot, questions, concurrency=ITEMS, progress=False)
        stats = sim.stats()
    assert first.report.succeeded == again.report.succeeded == ITEMS
    assert first.report.rate_wait > 0  # 30 at once against a burst of 9
    assert sent == ITEMS and again.report.cache_hits == ITEMS, again.report
    assert stats.requests == sent  # the second run sent nothing
    assert again.report.rate_wait == 0 and again.report.throttled == 0
    assert stats.rate_limited == {}


async def test_a_budget_binds_under_a_rate_limit_and_its_refusals_take_no_rate() -> None:
    async with serve(rate_limits=SimRateLimits(requests_per_minute=600)) as sim:
        model = make_model(
            "openai",
            sim,
            rate_limit=RateLimit(requests_per_minute=540),
            pricing=PRICING,
            max_concurrency=4,
        )
        bot = raygent.agent(model=model, model_options={"max_tokens": 20})
        one = await bot.execute("how much is one?")
        assert one.ok and one.usage.cost is not None
        per_item = one.usage.cost.total
        budget = Budget(usd=per_item * 15)
        result = await raygent.batch(
            bot, [f"q{i}" for i in range(ITEMS)], concurrency=4, budget=budget, progress=False
        )
        stats = sim.stats()
    report = result.report
    assert 0 < report.succeeded < ITEMS
    assert report.errors == {"BUDGET_EXCEEDED": report.failed}
    assert result.usage.cost is not None and result.usage.cost.total <= budget.usd
    # Only what the budget let through was sent, none of it refused for the rate.
    assert stats.requests == 1 + result.usage.requests == 1 + report.succeeded
    assert stats.rate_limited == {}


async def test_behind_a_fallbacks_failing_first_model_the_second_holds_its_rate() -> None:
    down = Rule(match=Match(model="^down$"), reply=Reply(fault=Fault(kind="status", status=503)))
    async with serve([down, Rule(reply=Reply(text="ok"))], rate_limits=LIMITS) as sim:
        first = OpenAIModel("down", base_url=sim.openai_base_url, api_key=KEY)
        second = make_model("openai", sim, rate_limit=RateLimit(requests_per_minute=540))
        bot = raygent.agent(model=raygent.fallback_model([first, second]))
        result = await raygent.batch(
            bot, [f"q{i}" for i in range(ITEMS)], concurrency=ITEMS, progress=False
        )
        stats = sim.stats()
    assert result.report.succeeded == ITEMS
    # Each item: the first model's 503, then the second model's answer, paced by its own
    # limit (the first model's failures took none of it): no 429 from the provider.
    assert stats.rate_limited == {}
    assert result.report.rate_wait > 0
    trips = [item.result.report.trips[0] for item in result.items]
    assert all(len(trip.attempts) == 1 for trip in trips)  # the first model's failure

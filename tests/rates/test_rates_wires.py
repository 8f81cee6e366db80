"""Gemini and Bedrock under rate limits and budgets in this process (the twin of
tests/ray/test_ray_rates_wires.py): a configured limit holds against a simulator that
enforces it as Google and AWS do (429 `RESOURCE_EXHAUSTED` with a `RetryInfo`;
`ThrottlingException`; no rate-limit headers from either); with nothing configured the
rate is learnt from the throttling replies alone, the job still going at a share of the
limit; and a job's budget, priced from the wire's usage, stops it."""

from __future__ import annotations

import time

import pytest
from wires_support import (
    MAX_TOKENS,
    THROTTLING,
    WIRES,
    answered,
    check_budget,
    per_request,
    questions,
    throttled,
    throttled_sends,
    uniform_rules,
    wire_model,
)

import raygent
from raygent import Budget, RateLimit
from raygent.sim import Latency, SimRateLimits, serve

RPM = 600  # 10 a second
ITEMS, CONCURRENCY = 60, 16


@pytest.mark.parametrize("wire", WIRES)
async def test_a_configured_rate_holds_on_the_wire(wire: str) -> None:
    windowed = SimRateLimits(requests_per_minute=RPM, window_seconds=1.0)  # 10 in any second
    async with serve(uniform_rules(), rate_limits=windowed) as sim:
        model = wire_model(wire, sim, rate_limit=RateLimit(requests_per_minute=RPM))
        bot = raygent.agent(model=model)
        started = time.monotonic()
        result = await raygent.batch(bot, questions(ITEMS), concurrency=CONCURRENCY, progress=False)
        seconds = time.monotonic() - started
        stats = sim.stats()
    assert result.report.succeeded == ITEMS, result.report.errors
    assert throttled(stats) <= 1, stats.rate_limited  # 1%
    assert stats.admitted_requests == ITEMS
    assert ITEMS / seconds * 60 >= 0.5 * RPM, seconds  # 6 s at best


@pytest.mark.parametrize("wire", WIRES)
async def test_a_rate_nobody_configured_is_learnt_from_the_throttling_replies(
    wire: str,
) -> None:
    async with serve(uniform_rules(), rate_limits=SimRateLimits(requests_per_minute=RPM)) as sim:
        bot = raygent.agent(model=wire_model(wire, sim))  # no rate_limit: learnt
        started = time.monotonic()
        result = await raygent.batch(bot, questions(ITEMS), concurrency=CONCURRENCY, progress=False)
        seconds = time.monotonic() - started
        stats = sim.stats()
    assert result.report.succeeded == ITEMS, result.report.errors
    assert answered(stats) == ITEMS
    sends = throttled_sends(result.items)
    assert throttled(stats) == len(sends) == result.report.throttled > 0
    assert {s["error"]["provider_code"] for s in sends} == {THROTTLING[wire]}
    if wire == "gemini":  # RetryInfo's delay read, and waited out
        assert all(s["retry_after"] == 1.0 == s["wait"] for s in sends), sends
    else:  # no wait named: the retry policy's backoff (and the key's pause)
        assert all(s["retry_after"] is None and s["wait"] > 0 for s in sends), sends
    # The first burst's, then the sends in flight when a round's probe up meets the
    # limit: 15-23 for 60 items on a quiet machine, 31 once on CI's loaded one, where a
    # round's replies come late and more sends go before the cut.
    assert len(sends) < 0.6 * ITEMS, len(sends)
    # Learnt, not collapsed: each of a burst's 429s cutting the rate again took it to
    # a few dozen a minute (Bedrock's 60 items took 141 s, Gemini's 38 s).
    assert ITEMS / seconds * 60 >= 0.3 * RPM, seconds


@pytest.mark.parametrize("wire", WIRES)
async def test_a_jobs_budget_stops_it_priced_from_the_wire(wire: str) -> None:
    items = 120
    async with serve(uniform_rules(), latency=Latency(fixed_ms=2)) as sim:
        bot = raygent.agent(model=wire_model(wire, sim), model_options={"max_tokens": MAX_TOKENS})
        cost = await per_request(bot)
        budget = Budget(usd=items * cost / 3)
        before = answered(sim.stats())
        result = await raygent.batch(
            bot, questions(items), concurrency=CONCURRENCY, budget=budget, progress=False
        )
        spent = (answered(sim.stats()) - before) * cost
    check_budget(result, budget, cost, spent, in_flight=CONCURRENCY)
    assert budget.usd is not None and spent <= budget.usd  # replies within their reservations

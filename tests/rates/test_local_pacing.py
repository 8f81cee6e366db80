"""Rates held by the local backend against the simulator enforcing them (real HTTP):
configured, learnt from the headers, over one-second sliding windows (no second carries
more than its share), and reported on the trips and the batch."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from rates_support import make_model

import raygent
from raygent import RateLimit
from raygent.rates import RatePacer, need_of
from raygent.seams import LOCAL, LocalModelAccess, RetryPolicy
from raygent.seams.rated import HeldRate
from raygent.sim import Fault, Match, Reply, Rule, SimRateLimits, serve


async def _job(model: object, items: int, concurrency: int = 16) -> raygent.BatchResult:
    return await raygent.batch(
        raygent.agent(model=model),
        [f"q{i}" for i in range(items)],
        concurrency=concurrency,
        retry=raygent.Retry(attempts=4, base_delay=0.2),
        progress=False,
    )


async def test_a_configured_rate_is_held_with_no_429s() -> None:
    async with serve(rate_limits=SimRateLimits(requests_per_minute=600)) as sim:
        # Held a little under the provider's: timing jitter cannot tip it over.
        model = make_model("openai", sim, rate_limit=RateLimit(requests_per_minute=540))
        result = await _job(model, 30)
        stats = sim.stats()
    assert result.report.succeeded == 30
    assert stats.rate_limited == {}
    assert result.report.throttled == 0
    # 30 requests against a burst of 9: most of the last 20 waited for the refill.
    assert result.report.rate_wait > 0
    waits = [t.rate_wait for item in result.items for t in item.result.report.trips]
    assert sum(1 for w in waits if w > 0) >= 10


async def test_with_nothing_configured_the_rate_is_learnt_from_the_headers() -> None:
    async with serve(rate_limits=SimRateLimits(requests_per_minute=600)) as sim:
        model = make_model("anthropic", sim)
        result = await _job(model, 40)
        stats = sim.stats()
    assert result.report.succeeded == 40
    assert sum(stats.rate_limited.values()) <= 2  # the slow start's probes only fit


WINDOWED = SimRateLimits(requests_per_minute=600, window_seconds=1.0)  # 10 in any second


async def test_a_configured_rate_is_paced_under_every_windows_share() -> None:
    """The limit configured as the provider states it, enforced over one-second
    sliding windows: paced at `FILL` of it, no second carries more than its share."""
    async with serve(rate_limits=WINDOWED) as sim:
        model = make_model("openai", sim, rate_limit=RateLimit(requests_per_minute=600))
        result = await _job(model, 40, concurrency=32)
        stats = sim.stats()
    assert result.report.succeeded == 40
    assert sum(stats.rate_limited.values()) <= 1, stats.rate_limited
    # Against the same limit held by a bucket of a second's share (up to 20 in a second).
    async with serve(rate_limits=SimRateLimits(requests_per_minute=600)) as sim:
        model = make_model("openai", sim, rate_limit=RateLimit(requests_per_minute=600))
        await _job(model, 40, concurrency=32)
        bucket = sim.stats()
    # The bucket would have let 20 through in the first second; paced, 9 leave in any
    # second (the simulator's clock, in this process, may see a few bunched).
    assert bucket.peak_requests_per_second <= 12


async def test_a_rate_learnt_from_the_headers_is_paced_under_every_windows_share() -> None:
    async with serve(rate_limits=WINDOWED) as sim:
        model = make_model("openai", sim)  # nothing configured: the headers say 600
        result = await _job(model, 40, concurrency=32)
        stats = sim.stats()
    assert result.report.succeeded == 40
    assert sum(stats.rate_limited.values()) <= 1, stats.rate_limited


async def test_a_429_is_counted_on_its_trip_pauses_the_key_and_is_sent_again() -> None:
    fault = Fault(kind="status", status=429, retry_after=0.2)
    script = [
        Rule(match=Match(last_user="^first$"), reply=Reply(fault=fault), times=1),
        Rule(match=Match(last_user="^never$"), reply=Reply(fault=fault)),
        Rule(reply=Reply(text="ok")),
    ]
    async with serve(script) as sim:
        model = make_model("openai", sim, rate_limit=RateLimit(requests_per_minute=6000))
        agent = raygent.agent(model=model)
        retried = await agent.execute("first")
        later = await agent.execute("second")
        backend = dataclasses.replace(LOCAL, models=LocalModelAccess(RetryPolicy(max_attempts=2)))
        refused = await raygent.agent(model=model, backend=backend).execute("never")
    # The 429 paused the key; the request was sent again once the pause was over.
    trip = retried.report.trips[0]
    assert retried.ok and trip.throttled == 1
    assert trip.rate_wait > 0.1  # its second send waited out the retry-after
    assert [(a["status"], a["ok"]) for a in trip.attempts] == [(429, False), (None, True)]
    assert retried.usage.requests == 2  # the 429 is a request, billed at nothing
    assert later.ok and later.report.trips[0].throttled == 0
    # Sent as often as the retry policy lets it, then the 429 is the run's error.
    assert refused.error is not None and refused.error.code == "PROVIDER_RATE_LIMITED"
    assert refused.report.trips[0].throttled == 2 and refused.error.details["attempts"] == 2


async def test_a_waiter_goes_when_a_request_in_flight_gives_back_its_estimate() -> None:
    """A request waiting for room wakes when one in flight settles below its estimate
    (Anthropic gives back the unused part of `max_tokens`), not at the time it was told
    before: its wait would otherwise be the whole window."""
    # 10 output tokens a second over windows of 4 s: 38 tokens a window.
    held = HeldRate(RatePacer(RateLimit(output_tokens_per_minute=600, burst=4.0), time.monotonic()))
    first = need_of(0.0, 30.0)
    assert await held.wait(first, None) == 0.0
    told = held.pacer.ready_in(need_of(0.0, 30.0), time.monotonic())
    assert told > 3.0  # two reservations of 30 do not fit a window of 38
    waiter = asyncio.ensure_future(held.wait(need_of(0.0, 30.0), None))
    for _ in range(3):
        await asyncio.sleep(0)
    assert not waiter.done()
    held.settle(first, need_of(0.0, 1.0), time.monotonic())  # used 1 token of its 30
    waited = await asyncio.wait_for(waiter, timeout=told / 2)
    assert waited < told / 2

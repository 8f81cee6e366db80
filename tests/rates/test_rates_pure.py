"""The pure parts of rate limits, with time given: the bucket, the learner, the pacer,
and what a request counts (raygent.rates)."""

from __future__ import annotations

import pydantic
import pytest

from raygent import OpenAIModel, RateLimit, UserMessage
from raygent.budgets import worst_case
from raygent.models.contract import ModelOptions
from raygent.rates import (
    DEFAULT_OUTPUT_RESERVE,
    FILL,
    Bucket,
    RateLearner,
    RatePacer,
    RateReading,
    Window,
    estimate,
    need_of,
)


def test_rate_limit_validates() -> None:
    with pytest.raises(pydantic.ValidationError):
        RateLimit(requests_per_minute=0)
    with pytest.raises(pydantic.ValidationError):
        RateLimit(tokens_per_minute=-5)
    with pytest.raises(pydantic.ValidationError):
        RateLimit(burst=0)
    with pytest.raises(pydantic.ValidationError):
        RateLimit(requests_per_minute=60, per_hour=3)  # type: ignore[call-arg]
    limit = RateLimit(requests_per_minute=60)
    assert limit.binds and not RateLimit().binds
    with pytest.raises(pydantic.ValidationError):
        limit.requests_per_minute = 5  # type: ignore[misc]


def test_tightest_takes_each_dimension_lower() -> None:
    a = RateLimit(requests_per_minute=60, tokens_per_minute=1000, burst=2)
    b = RateLimit(requests_per_minute=30, output_tokens_per_minute=500)
    low = a.tightest(b)
    assert low.per_minute == (30, 1000, None, 500)
    assert low.burst == 2


def test_bucket_starts_with_its_burst_then_refills_smoothly() -> None:
    bucket = Bucket(rate=10, burst=1, now=0.0)  # 10/s, a second's share at once
    for _ in range(10):
        assert bucket.ready_in(1, 0.0) == 0
        bucket.take(1, 0.0)
    assert bucket.ready_in(1, 0.0) == pytest.approx(0.1)
    assert bucket.ready_in(1, 0.05) == pytest.approx(0.05)
    assert bucket.ready_in(1, 0.1) == 0
    # Over a long quiet spell the level stops at the capacity: no more than a burst.
    assert bucket.ready_in(11, 100.0) == 0  # more than the capacity waits only for a full one
    bucket.take(11, 100.0)
    assert bucket.level == pytest.approx(-1)  # a debt the refill pays first
    assert bucket.ready_in(1, 100.0) == pytest.approx(0.2)


def test_bucket_settles_at_real_use_and_releases_errors() -> None:
    bucket = Bucket(rate=100, burst=1, now=0.0)  # capacity 100
    bucket.take(80, 0.0)
    bucket.settle(80, 30, 0.0)  # used 30: 50 come back
    assert bucket.level == pytest.approx(70)
    bucket.take(60, 0.0)
    bucket.settle(60, 90, 0.0)  # used more than reserved: the excess is owed
    assert bucket.level == pytest.approx(-20)
    bucket.take(10, 0.0)
    bucket.settle(10, 0, 0.0)  # an error reply used nothing
    assert bucket.level == pytest.approx(-20)
    bucket.settle(0, 0, 10.0)
    assert bucket.level == pytest.approx(100)  # capped at the capacity


def test_bucket_new_rate_keeps_level_under_new_capacity() -> None:
    bucket = Bucket(rate=10, burst=1, now=0.0)
    bucket.set_rate(5, 1, 0.0)
    assert (bucket.capacity, bucket.level) == (5, 5)
    bucket.empty(0.0)
    assert bucket.ready_in(1, 0.0) == pytest.approx(0.2)
    with pytest.raises(ValueError):
        Bucket(rate=0, burst=1, now=0.0)


def test_no_more_than_a_seconds_share_in_any_second() -> None:
    """Many requests asking at once: within any one second no more than that second's
    share go (what a provider enforcing over one-second windows allows), spaced at
    `FILL` of the rate."""
    pacer = RatePacer(RateLimit(requests_per_minute=1200), 0.0)  # 20 a second
    sent: list[float] = []
    now = 0.0
    while len(sent) < 200:
        wait = pacer.ready_in(need_of(0, 0), now)
        now += wait
        pacer.take(need_of(0, 0), now)
        sent.append(now)
    for end in sent:
        in_window = sum(1 for t in sent if end - 1 < t <= end)
        assert in_window <= 19  # under the 20 a one-second window admits
    assert sent[-1] - sent[-101] == pytest.approx(100 / (20 * FILL), rel=1e-6)


def test_estimate_is_what_the_budget_reserves() -> None:
    model = OpenAIModel("gpt-4o-mini", api_key="sk-test")
    messages = [UserMessage(content="hello " * 100)]
    options = ModelOptions(max_tokens=200)
    prompt, output = estimate(messages, options, model)
    assert output == 200
    amount, _ = worst_case(model, messages, options)
    assert (amount[2], amount[3]) == (prompt, output)
    assert prompt >= 600 // 4
    assert estimate(messages, ModelOptions(), model)[1] == DEFAULT_OUTPUT_RESERVE


def test_pacer_with_nothing_configured_or_learnt_is_idle() -> None:
    pacer = RatePacer(None, 0.0, learn=False)
    assert pacer.idle
    assert pacer.concurrency(64) == 64
    learning = RatePacer(None, 0.0)
    assert learning.probing and not learning.idle
    learning.take(need_of(10, 10), 0.0)
    learning.replied(None, 0.1, 0.1)  # no rate headers: nothing to pace
    learning.settle(need_of(10, 10), need_of(5, 5), 0.1)
    assert learning.idle and not learning.probing


def test_pacer_settles_tokens_at_real_use() -> None:
    pacer = RatePacer(RateLimit(tokens_per_minute=6000), 0.0)  # 100/s, 96 in a window
    need = need_of(20, 30)
    pacer.take(need, 0.0)
    assert pacer.ready_in(need, 0.0) == pytest.approx(1.0)  # 50 + 50 over the window's 96
    pacer.settle(need, need_of(5, 5), 0.0)  # used 10 of 50
    assert pacer.ready_in(need, 0.0) == pytest.approx(10 / (100 * FILL) - 0.075)
    pacer.take(need, 1.0)
    pacer.settle(need, None, 1.0)  # an error: the whole reservation comes back
    assert pacer.ready_in(need, 1.0) == 0


def test_pacer_holds_input_and_output_apart() -> None:
    pacer = RatePacer(RateLimit(output_tokens_per_minute=600), 0.0)  # 10/s output
    pacer.take(need_of(1000, 10), 0.0)
    assert pacer.ready_in(need_of(10_000, 1), 0.0) == pytest.approx(10 / (10 * FILL) - 0.075)


def test_429_pauses_for_retry_after_and_cuts_the_rate() -> None:
    pacer = RatePacer(RateLimit(requests_per_minute=600), 0.0)
    pacer.take(need_of(0, 0), 0.0)
    pacer.throttled(RateReading(retry_after=2.0), 0.0)
    pacer.settle(need_of(0, 0), None, 0.0)
    assert pacer.throttles == 1
    assert pacer.ready_in(need_of(0, 0), 0.0) == pytest.approx(2.0)
    limit = pacer.limit
    assert limit is not None and limit.requests_per_minute == pytest.approx(420)
    # Successes step the rate back up to the configured ceiling, never past it.
    for i in range(200):
        pacer.replied(None, 0.1, 3.0 + i)
    limit = pacer.limit
    assert limit is not None and limit.requests_per_minute == 600


def test_headers_teach_the_rate_under_the_ceiling() -> None:
    reading = RateReading(
        requests=Window(limit=1200, remaining=1100, reset=3.0),
        tokens=Window(limit=60_000, remaining=50_000, reset=5.0),
    )
    pacer = RatePacer(None, 0.0)
    pacer.take(need_of(10, 10), 0.0)
    pacer.replied(reading, 0.2, 0.2)
    pacer.settle(need_of(10, 10), need_of(10, 10), 0.2)
    limit = pacer.limit
    assert limit is not None and not pacer.idle and not pacer.probing
    # Held as a configured limit is (the window sends under either).
    assert limit.requests_per_minute == 1200
    assert limit.tokens_per_minute == 60_000
    # A configured limit is the ceiling: what is learnt may only lower it.
    capped = RatePacer(RateLimit(requests_per_minute=600), 0.0)
    capped.replied(reading, 0.2, 0.2)
    limit = capped.limit
    assert limit is not None and limit.requests_per_minute == 600
    lower = RatePacer(RateLimit(requests_per_minute=6000), 0.0)
    lower.replied(reading, 0.2, 0.2)
    limit = lower.limit
    assert limit is not None and limit.requests_per_minute == 1200


def test_429_with_nothing_known_starts_at_what_was_sent() -> None:
    pacer = RatePacer(None, 0.0)
    now = 0.0
    pacer.take(need_of(0, 0), now)
    pacer.replied(None, 0.05, 0.05)
    pacer.settle(need_of(0, 0), None, 0.05)
    assert pacer.idle
    for _ in range(60):  # 30 a second for two seconds, unpaced
        now += 1 / 30
        pacer.take(need_of(0, 0), now)
    pacer.throttled(None, now)
    limit = pacer.limit
    assert limit is not None and limit.requests_per_minute is not None
    # About 30 a second were going: the rate is cut to about 0.7 of that.
    assert 0.5 * 30 * 60 < limit.requests_per_minute < 0.8 * 30 * 60
    assert pacer.concurrency(64) < 64
    assert pacer.ready_in(need_of(0, 0), now) == pytest.approx(1.0)  # no retry-after said


def test_a_429_that_names_a_spent_dimension_cuts_that_one() -> None:
    learner = RateLearner(RateLimit(requests_per_minute=600, tokens_per_minute=6000), 0.0)
    learner.read(RateReading(requests=Window(limit=600), tokens=Window(limit=6000)))
    spent = RateReading(tokens=Window(limit=6000, remaining=0), retry_after=1.0)
    learner.throttled(spent, 10, 0.0)
    assert learner.rates[0] == 600
    assert learner.rates[1] == pytest.approx(4200)


def test_rising_latency_cuts_the_concurrency() -> None:
    learner = RateLearner(None, 0.0)
    learner.read(RateReading(requests=Window(limit=6000)))
    for i in range(10):
        learner.succeeded(0.1, 32, float(i))
    assert learner.concurrency is None
    for i in range(20):
        learner.succeeded(1.0, 32, 10.0 + i)
    assert learner.concurrency is not None and learner.concurrency < 32
    low = learner.concurrency
    for i in range(200):
        learner.succeeded(0.1, 8, 40.0 + i)
    assert learner.concurrency > low  # steady latency: one more slot per window


def test_a_retry_after_past_a_minute_pauses_nobody() -> None:
    """A quota's 429 (an hour's retry-after) goes back to its caller; the key is not
    held for an hour."""
    pacer = RatePacer(RateLimit(requests_per_minute=600), 0.0)
    pacer.throttled(RateReading(retry_after=3600.0), 0.0)
    assert pacer.ready_in(need_of(0, 0), 0.0) < 1.0

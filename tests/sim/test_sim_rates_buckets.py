"""The simulator's rate buckets on a driven clock: refill, burst, debt, refusal causes,
refunds and settlement, the headers' formats, and the stats' rolling second."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

import pytest

from raygent.sim import SimRateLimits
from raygent.sim._config import SimConfig
from raygent.sim._rates import (
    Admission,
    Bucket,
    Cost,
    RateLimiter,
    Refusal,
    duration,
    error_body,
    retry_after,
)
from raygent.sim._stats import StatsRecorder

# 2026-01-01T00:00:00Z: a wall clock the Anthropic resets are read against.
EPOCH = 1767225600.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> float:
        return EPOCH + self.now - 100.0


def limiter(**limits: Any) -> tuple[RateLimiter, Clock]:
    clock = Clock()
    rates = RateLimiter(SimRateLimits(**limits), clock=clock, wall=clock.wall)
    return rates, clock


def test_bucket_holds_a_seconds_share_and_refills_continuously() -> None:
    bucket = Bucket(1200, burst_seconds=1.0, now=0.0)
    assert (bucket.rate, bucket.capacity) == (20.0, 20.0)
    for _ in range(20):
        assert bucket.wait(1, 0.0) == 0.0
        bucket.take(1, 0.0)
    assert bucket.wait(1, 0.0) == pytest.approx(0.05)
    assert bucket.remaining(0.0) == 0
    assert bucket.remaining(0.5) == 10  # half a second refills half the share
    assert bucket.remaining(30.0) == 20  # never past the capacity
    assert bucket.until_full(30.0) == 0.0


def test_bucket_burst_and_minimum_capacity() -> None:
    assert Bucket(1200, burst_seconds=3.0, now=0.0).capacity == 60.0
    tiny = Bucket(2, burst_seconds=1.0, now=0.0)  # 1/30 a second: at least one fits
    assert tiny.capacity == 1.0
    tiny.take(1, 0.0)
    assert tiny.wait(1, 0.0) == pytest.approx(30.0)


def test_a_cost_over_the_capacity_waits_for_a_full_bucket_and_leaves_debt() -> None:
    bucket = Bucket(6000, burst_seconds=1.0, now=0.0)  # 100 a second
    assert not bucket.too_large(4000)
    bucket.take(10, 0.0)
    assert bucket.wait(4000, 0.0) == pytest.approx(0.1)  # the 10 must come back first
    assert bucket.wait(4000, 0.1) == 0.0
    bucket.take(4000, 0.1)
    assert bucket.remaining(0.1) == 0
    assert bucket.wait(1, 0.1) == pytest.approx(39.01)  # 3,900 of debt, then one
    assert bucket.until_full(0.1) == pytest.approx(40.0)
    assert bucket.too_large(6001)


def test_admission_charges_every_limit_or_none() -> None:
    rates, clock = limiter(requests_per_minute=600, tokens_per_minute=6000)  # 10, 100
    cost = Cost(input_tokens=30, max_tokens=20)
    assert isinstance(rates.admit("k", "m", cost), Admission)
    assert isinstance(rates.admit("k", "m", cost), Admission)
    refused = rates.admit("k", "m", cost)
    assert refused == Refusal("tokens", pytest.approx(0.5), 6000, 50)
    headers = rates.headers("openai", "k", "m")
    assert headers["x-ratelimit-remaining-requests"] == "8"  # the refusal charged nothing
    assert headers["x-ratelimit-remaining-tokens"] == "0"
    clock.now += 0.5
    assert isinstance(rates.admit("k", "m", cost), Admission)


def test_the_refusal_names_the_limit_waited_for_longest() -> None:
    rates, _ = limiter(requests_per_minute=60, output_tokens_per_minute=300)  # 1 and 5 a s
    rates.admit("k", "m", Cost(5, 10))  # 5 tokens of debt
    refused = rates.admit("k", "m", Cost(5, 10))
    assert isinstance(refused, Refusal)
    assert (refused.cause, refused.wait) == ("output_tokens", pytest.approx(2.0))
    too_large = rates.admit("k", "m", Cost(5, 301))
    assert too_large == Refusal("output_tokens", None, 300, 301)
    assert retry_after(too_large) == {"x-should-retry": "false"}
    assert retry_after(refused) == {"retry-after": "2"}
    assert retry_after(Refusal("requests", 0.01, 60, 1)) == {"retry-after": "1"}
    assert retry_after(Refusal("requests", 1.2, 60, 1)) == {"retry-after": "2"}


def test_limits_are_held_per_key_and_per_model() -> None:
    rates, _ = limiter(requests_per_minute=60)
    assert isinstance(rates.admit("a", "m", Cost(1)), Admission)
    assert isinstance(rates.admit("a", "m", Cost(1)), Refusal)
    assert isinstance(rates.admit("b", "m", Cost(1)), Admission)
    assert isinstance(rates.admit("a", "other", Cost(1)), Admission)
    shared, _ = limiter(requests_per_minute=60, per_model=False)
    assert isinstance(shared.admit("a", "m", Cost(1)), Admission)
    assert isinstance(shared.admit("a", "other", Cost(1)), Refusal)
    rates.reset()
    assert isinstance(rates.admit("a", "m", Cost(1)), Admission)


def test_refund_and_settlement() -> None:
    rates, _ = limiter(requests_per_minute=600, output_tokens_per_minute=6000)
    first = rates.admit("k", "m", Cost(5, 100))
    assert isinstance(first, Admission)
    assert isinstance(rates.admit("k", "m", Cost(5, 1)), Refusal)
    first.settle(30)  # 70 of the 100 charged were not generated
    assert rates.headers("openai", "k", "m")["x-ratelimit-remaining-tokens"] == "70"
    first.settle(0)  # once only
    assert rates.headers("openai", "k", "m")["x-ratelimit-remaining-tokens"] == "70"
    second = rates.admit("k", "m", Cost(5, 70))
    assert isinstance(second, Admission)
    second.refund()
    second.settle(0)  # a refunded admission is settled already
    headers = rates.headers("openai", "k", "m")
    assert headers["x-ratelimit-remaining-tokens"] == "70"
    assert headers["x-ratelimit-remaining-requests"] == "9"


def test_input_tokens_read_from_cache_are_not_charged() -> None:
    cost = Cost(input_tokens=1200, max_tokens=100, cached_tokens=1000)
    assert [cost.of(k) for k in ("requests", "tokens", "input_tokens", "output_tokens")] == [
        1,
        1300,
        200,
        100,
    ]


def test_openai_headers() -> None:
    rates, clock = limiter(requests_per_minute=1200, tokens_per_minute=90000)
    assert rates.headers("openai", "k", "m")["x-ratelimit-reset-requests"] == "0s"
    rates.admit("k", "m", Cost(450, 1000))
    headers = rates.headers("openai_responses", "k", "m")
    assert headers == {
        "x-ratelimit-limit-requests": "1200",
        "x-ratelimit-remaining-requests": "19",
        "x-ratelimit-reset-requests": "50ms",
        "x-ratelimit-limit-tokens": "90000",
        "x-ratelimit-remaining-tokens": "50",
        "x-ratelimit-reset-tokens": "967ms",
    }
    clock.now += 0.25
    assert rates.headers("openai", "k", "m")["x-ratelimit-remaining-tokens"] == "425"


def test_anthropic_headers() -> None:
    rates, _ = limiter(
        requests_per_minute=60,
        input_tokens_per_minute=60_000,
        output_tokens_per_minute=12_000,
        burst_seconds=10,
    )  # buckets of 10 requests, 10,000 input and 2,000 output tokens
    rates.admit("k", "m", Cost(2500, 500))
    headers = rates.headers("anthropic", "k", "m")
    assert headers == {
        "anthropic-ratelimit-requests-limit": "60",
        "anthropic-ratelimit-requests-remaining": "9",
        "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:01Z",
        "anthropic-ratelimit-input-tokens-limit": "60000",
        "anthropic-ratelimit-input-tokens-remaining": "7000",  # 7,500 rounded down
        "anthropic-ratelimit-input-tokens-reset": "2026-01-01T00:00:03Z",  # 2.5 s
        "anthropic-ratelimit-output-tokens-limit": "12000",
        "anthropic-ratelimit-output-tokens-remaining": "1000",  # 1,500 rounded down
        "anthropic-ratelimit-output-tokens-reset": "2026-01-01T00:00:03Z",
        # input and output together, as Anthropic reports them
        "anthropic-ratelimit-tokens-limit": "72000",
        "anthropic-ratelimit-tokens-remaining": "9000",
        "anthropic-ratelimit-tokens-reset": "2026-01-01T00:00:03Z",
    }
    for name, value in headers.items():
        if name.endswith("-reset"):
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
            assert parsed.tzinfo == timezone.utc


def test_no_limits_no_headers_no_buckets() -> None:
    rates = RateLimiter(None)
    assert rates.admit("k", "m", Cost(10, 10)) is None
    assert rates.headers("openai", "k", "m") == {}
    assert RateLimiter(SimRateLimits()).limits is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0s"),
        (0.0004, "1ms"),
        (0.02, "20ms"),
        (0.999, "999ms"),
        (1.0, "1s"),
        (1.146, "1.146s"),
        (17.28, "17.28s"),
        (360.0, "6m0s"),
        (90.5, "1m30.5s"),
        (3723.0, "1h2m3s"),
    ],
)
def test_durations_as_openai_writes_them(seconds: float, text: str) -> None:
    assert duration(seconds) == text
    assert re.fullmatch(r"(\d+h)?(\d+m)?(\d+(\.\d+)?s|\d+ms)", text)


def test_error_bodies() -> None:
    refusal = Refusal("tokens", 1.146, 50000, 3006)
    openai = error_body("openai", refusal, "gpt-x", "req_1")
    assert openai.startswith(b'{"error":{"message":"Rate limit reached for gpt-x in org')
    assert b"on tokens per min (TPM): Limit 50000, Requested 3006. Please try again in 1.146s" in (
        openai
    )
    assert b'"type":"tokens","param":null,"code":"rate_limit_exceeded"' in openai
    too_large = error_body("openai_responses", Refusal("tokens", None, 100, 300), "m", "r")
    assert b"Request too large for m" in too_large
    anthropic = error_body("anthropic", Refusal("output_tokens", 2.0, 8000, 9), "c", "req_2")
    assert anthropic.startswith(b'{"type":"error","error":{"type":"rate_limit_error"')
    assert b"8,000 output tokens per minute" in anthropic
    assert anthropic.endswith(b'"request_id":"req_2"}')


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="tokens_per_minute"):
        SimRateLimits(tokens_per_minute=0)
    with pytest.raises(ValueError, match="burst_seconds"):
        SimRateLimits(requests_per_minute=1, burst_seconds=0)
    with pytest.raises(ValueError, match="twice"):
        SimConfig(requests_per_minute=5, rate_limits=SimRateLimits(requests_per_minute=6))
    folded = SimConfig(requests_per_minute=5, rate_limits=SimRateLimits(burst_seconds=2)).rates()
    assert folded == SimRateLimits(requests_per_minute=5, burst_seconds=2)
    assert SimConfig().rates() is None


def test_stats_count_admissions_and_the_peak_second() -> None:
    stats = StatsRecorder()
    for at in (0.0, 0.2, 0.4, 0.9):  # four within a second
        stats.admitted(at, input_tokens=10, max_tokens=5)
    for at in (1.3, 2.5):  # the window slides: 0.4, 0.9, 1.3 at most
        stats.admitted(at, input_tokens=100, max_tokens=0)
    stats.rate_limited("tokens")
    stats.rate_limited("tokens")
    stats.rate_limited("concurrency")
    snap = stats.snapshot()
    assert snap.admitted_requests == 6
    assert (snap.admitted_input_tokens, snap.admitted_output_tokens) == (240, 20)
    assert snap.admitted_tokens == 260
    assert snap.peak_requests_per_second == 4
    assert snap.peak_tokens_per_second == 130  # 0.4, 0.9 and 1.3
    assert snap.rate_limited == {"tokens": 2, "concurrency": 1}
    stats.reset()
    assert stats.snapshot().admitted_requests == 0

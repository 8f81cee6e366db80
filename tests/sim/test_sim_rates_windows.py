"""The simulator's sliding windows (`SimRateLimits(window_seconds=...)`) on a driven
clock: at most the window's share admitted in any window, whenever in it requests come
(stricter than the bucket of the same share), the refusal's wait, refunds, and the
headers stating the per-minute limits; and over real HTTP, a burst refused past the
window's share with the provider's 429."""

from __future__ import annotations

import httpx
import pytest
from sim_helpers import USER
from test_sim_rates_buckets import limiter

from raygent.sim import SimRateLimits, serve
from raygent.sim._rates import Admission, Bucket, Cost, Refusal, SlidingWindow


def test_a_window_admits_its_share_in_any_window_of_its_length() -> None:
    window = SlidingWindow(1200, seconds=1.0, now=0.0)  # 20 in any second
    assert window.capacity == 20.0
    stamps = [i * 0.01 for i in range(20)]  # all 20 in the first 0.2 s
    for stamp in stamps:
        assert window.wait(1, stamp) == 0.0
        window.take(1, stamp)
    assert window.remaining(0.5) == 0
    # The 21st fits when the first leaves the window, not a refill's 50 ms later.
    assert window.wait(1, 0.5) == pytest.approx(0.5)
    assert window.wait(1, 1.0) == 0.0
    assert window.until_full(1.0) == pytest.approx(0.19)


def test_a_window_is_stricter_than_the_bucket_of_its_share() -> None:
    """20 at once, then one every 50 ms: a bucket of a second's share admits 39 within one
    second; the window admits 20 in any second."""
    bucket, window = Bucket(1200, 1.0, 0.0), SlidingWindow(1200, 1.0, 0.0)
    stamps = [0.0] * 20 + [0.05 * i for i in range(1, 20)]
    admitted = {"bucket": [], "window": []}
    for stamp in stamps:
        for name, limit in (("bucket", bucket), ("window", window)):
            if limit.wait(1, stamp) == 0.0:
                limit.take(1, stamp)
                admitted[name].append(stamp)
    assert len(admitted["bucket"]) == 39  # all within [0, 0.95]: 39 in one second
    assert len(admitted["window"]) == 20


def test_window_charges_refunds_and_refusals() -> None:
    rates, clock = limiter(requests_per_minute=600, tokens_per_minute=6000, window_seconds=2.0)
    cost = Cost(input_tokens=60, max_tokens=40)  # 100 tokens; the window holds 200
    first = rates.admit("k", "m", cost)
    assert isinstance(first, Admission)
    clock.now += 0.5
    assert isinstance(rates.admit("k", "m", cost), Admission)
    refused = rates.admit("k", "m", cost)
    assert refused == Refusal("tokens", pytest.approx(1.5), 6000, 100)  # until the first leaves
    headers = rates.headers("openai", "k", "m")
    assert headers["x-ratelimit-limit-requests"] == "600"  # the minute's limit, stated
    assert headers["x-ratelimit-limit-tokens"] == "6000"
    assert headers["x-ratelimit-remaining-requests"] == "18"
    assert headers["x-ratelimit-remaining-tokens"] == "0"
    first.refund()
    assert isinstance(rates.admit("k", "m", cost), Admission)
    assert rates.admit("k", "m", Cost(6001)) == Refusal("tokens", None, 6000, 6001)


def test_window_seconds_is_checked() -> None:
    with pytest.raises(ValueError, match="window_seconds"):
        SimRateLimits(requests_per_minute=60, window_seconds=0)


def test_a_burst_over_http_meets_the_windows_share() -> None:
    limits = SimRateLimits(requests_per_minute=600, window_seconds=1.0)  # 10 in any second
    with serve(rate_limits=limits) as sim:
        with httpx.Client(base_url=sim.openai_base_url) as http:
            body = {"model": "sim-gpt", "messages": USER}
            statuses = [
                http.post("/chat/completions", json=body, headers={"Authorization": "Bearer k"})
                for _ in range(12)
            ]
        stats = sim.stats()
    assert [r.status_code for r in statuses].count(200) == 10
    limited = [r for r in statuses if r.status_code == 429]
    assert len(limited) == 2
    assert limited[0].headers["retry-after"] == "1"
    assert limited[0].headers["x-ratelimit-limit-requests"] == "600"
    assert stats.rate_limited == {"requests": 2} and stats.peak_requests_per_second == 10

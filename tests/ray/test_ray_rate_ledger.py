"""The gateway's rate limits, driven directly with the clock in the test's hand: requests
scheduled on one pace (each granted with its time, no window of a second holding more
than its share, whoever holds them), tokens from smooth buckets of a quarter of a
burst, granted in pieces, shared fairly, four kinds held apart, reserved and settled,
learnt from what holders read, and a dead holder's share back."""

from __future__ import annotations

import pytest

from raygent.actors import Bounds
from raygent.actors.gateway.endpoint_ledger import EndpointLedger, Report
from raygent.actors.gateway.rate_budget import HORIZON, Rates
from raygent.backend import PROBE_WINDOW, RateWindow
from raygent.rates import FILL, RateReading, Window

TTL = 10.0


class Holders:
    """Holders of one ledger that ask for rate budget and spend what they are given."""

    def __init__(self, ledger: EndpointLedger) -> None:
        self.ledger = ledger
        self.seq: dict[str, int] = {}
        self.got: dict[str, list[float]] = {}
        self.due: list[float] = []  # the times of every request granted

    def report(self, holder: str, now: float, **fields: object) -> None:
        seq = self.seq[holder] = self.seq.get(holder, 0) + 1
        version = self.ledger.holders[holder].version if holder in self.ledger.holders else 0
        fields.setdefault("want", 1)
        report = Report(seq, version, "me", held=0, in_use=0, **fields)  # type: ignore[arg-type]
        self.ledger.report(holder, report, "me", now, TTL)

    def take(self, holder: str, now: float) -> Rates:
        """What the holder's grant hands over now (and counts it)."""
        grant = self.ledger.grant_for(holder, "me", now, TTL)
        rates = grant.rates
        assert len(grant.due) == rates[0]
        self.due.extend(grant.due)
        got = self.got.setdefault(holder, [0.0] * 4)
        for k, amount in enumerate(rates):
            got[k] += amount
        return rates


def run(holders: Holders, names: list[str], wanted: Rates, seconds: float, step: float) -> None:
    """Every holder asks for `wanted` and takes what it is given, every `step` seconds
    (the gateway's own timer: a rebalance at each step)."""
    for i in range(round(seconds / step)):
        now = i * step
        for name in names:
            holders.report(name, now, wanted=wanted)
            holders.take(name, now)
        now = (i + 1) * step
        holders.ledger.rebalance(now)
        for name in names:
            holders.take(name, now)


def most_in_a_second(times: list[float]) -> int:
    """The most of `times` within any one-second window `(end - 1, end]`."""
    return max((sum(1 for t in times if end - 1 < t <= end) for end in times), default=0)


def test_requests_are_granted_in_pieces_each_with_its_time_on_one_pace() -> None:
    # 1,200 a minute = 20 a second: paced at FILL of it, a quarter second ahead at most.
    ledger = EndpointLedger(Bounds(64, requests_per_minute=1200, burst=1.0), now=0.0)
    holders = Holders(ledger)
    holders.report("a", 0.0, wanted=(1000.0, 0, 0, 0))
    assert holders.take("a", 0.0)[0] == 5  # a piece: a quarter second's, not a minute's
    holders.report("a", 0.0, wanted=(1000.0, 0, 0, 0))
    assert holders.take("a", 0.0)[0] == 2  # those due within the horizon
    assert max(holders.due) <= HORIZON
    ready = ledger.rates_ready_in(0.0)
    assert ready is not None and 0 < ready < 1 / (20 * FILL)  # the next one's time
    run(holders, ["a"], (1000.0, 0, 0, 0), seconds=10.0, step=0.05)
    assert 20 * FILL * 10 <= holders.got["a"][0] <= 20 * FILL * 10 + 8
    assert most_in_a_second(holders.due) <= 19  # under the 20 a second admits


def test_three_holders_share_a_rate_fairly_and_together_stay_under_it() -> None:
    ledger = EndpointLedger(Bounds(64, requests_per_minute=1200), now=0.0)
    holders = Holders(ledger)
    run(holders, ["a", "b", "c"], (100.0, 0, 0, 0), seconds=30.0, step=0.1)
    got = [holders.got[h][0] for h in "abc"]
    assert 0.9 * 20 * 30 <= sum(got) <= 20 * 30
    assert min(got) >= 0.9 * max(got)
    assert most_in_a_second(holders.due) <= 19  # all three together


def test_a_holder_that_does_not_collect_its_grant_is_owed_a_piece_at_most() -> None:
    # A stalled process: it asked for 60, then stopped calling. Its rate piles up in
    # the bucket (which holds a quarter second's), never in what it is owed: when it
    # comes back it cannot send a burst of what accrued meanwhile.
    ledger = EndpointLedger(Bounds(64, requests_per_minute=1200), now=0.0)
    holders = Holders(ledger)
    holders.report("a", 0.0, wanted=(60.0, 0, 0, 0))
    for step in range(1, 41):
        ledger.rebalance(step * 0.1)
        assert ledger.holders["a"].rates[0] <= 5 + 1
        assert ledger.rates_ready_in(step * 0.1) is None  # no timer spinning for it
    assert holders.take("a", 4.0)[0] <= 5 + 1


def test_input_and_output_tokens_are_held_apart() -> None:
    # 6,000 input and 600 output tokens a minute: 100 and 10 a second.
    bounds = Bounds(64, input_tokens_per_minute=6000, output_tokens_per_minute=600)
    ledger = EndpointLedger(bounds, now=0.0)
    holders = Holders(ledger)
    assert ledger.rates.held() == (False, False, True, True)
    run(holders, ["a"], (0, 0, 10_000.0, 10_000.0), seconds=10.0, step=0.1)
    _, _, inputs, outputs = holders.got["a"]
    assert 0.95 * 1000 <= inputs <= 25 + 1000 + 1e-6
    assert 0.95 * 100 <= outputs <= 2.5 + 100 + 1e-6


def test_a_reservation_settles_at_the_real_usage() -> None:
    ledger = EndpointLedger(Bounds(8, tokens_per_minute=6000), now=0.0)  # 100 a second
    holders = Holders(ledger)
    holders.report("a", 0.0, wanted=(0, 50.0, 0, 0))
    assert holders.take("a", 0.0)[1] == 25  # what the bucket holds: a quarter second's
    bucket = ledger.rates.buckets[1]
    assert bucket is not None and bucket.level == 0
    # The request estimated 25 and used 5: 20 come back, at once.
    holders.report("a", 0.0, settled=(0, 20.0, 0, 0), wanted=(0, 25.0, 0, 0))
    assert holders.take("a", 0.0)[1] == 20
    # Another used 225 over its 25: a debt of 200, two seconds of the rate.
    holders.report("a", 0.0, settled=(0, -200.0, 0, 0), wanted=(0, 25.0, 0, 0))
    assert holders.take("a", 0.0)[1] == 0
    assert ledger.rates_ready_in(0.0) == pytest.approx((200 + 25) / 100)


def said(requests: float | None = None, tokens: float | None = None) -> RateReading:
    """A reply's reading: the limits its headers stated."""
    return RateReading(
        requests=None if requests is None else Window(limit=requests),
        tokens=None if tokens is None else Window(limit=tokens),
    )


def test_what_the_provider_says_is_learnt_under_the_configured_ceiling() -> None:
    # Two replicas: this gateway holds half of every limit.
    bounds = Bounds(8, requests_per_minute=600, share=0.5, learn=True)
    ledger = EndpointLedger(bounds, now=0.0)
    holders = Holders(ledger)
    assert ledger.rates.per_minute()[0] == 600
    holders.report("a", 0.0, observed=said(2000.0, 90_000.0))
    # The provider allows 2,000 a minute: the configured 1,200 (600 here) is the
    # ceiling; the tokens nobody configured are held at half of its 90,000 (the pace
    # sends under both).
    assert ledger.rates.per_minute()[:2] == pytest.approx((600, 45_000))
    holders.report("a", 0.0, observed=said(600.0, 90_000.0))
    assert ledger.rates.per_minute()[0] == pytest.approx(300)  # it says less: held


def test_with_nothing_configured_a_few_requests_go_until_a_reply_says_the_limits() -> None:
    ledger = EndpointLedger(Bounds(16, learn=True), now=0.0)
    holders = Holders(ledger)
    holders.report("a", 0.0, want=16)
    assert ledger.holders["a"].grant == PROBE_WINDOW and ledger.rates.held() == (False,) * 4
    holders.report("a", 0.1, want=16, succeeded=1, observed=said(1200.0))
    assert ledger.holders["a"].grant == 16
    assert ledger.rates.per_minute()[0] == pytest.approx(1200, rel=0.02)


def test_a_reply_with_no_rate_headers_ends_the_probe_and_holds_no_rate() -> None:
    ledger = EndpointLedger(Bounds(16, learn=True), now=0.0)
    holders = Holders(ledger)
    holders.report("a", 0.0, want=16, succeeded=1)
    assert ledger.holders["a"].grant == 16 and ledger.rates.held() == (False,) * 4


def test_a_rate_lease_with_nothing_to_hold_counts_no_slots_once_a_reply_came() -> None:
    # A model's rate lease has no concurrency bound: past the slow start, its holders
    # admit without waiting for slots from the gateway (the endpoint's lease has them).
    ledger = EndpointLedger(Bounds(None, learn=True), now=0.0)
    holders = Holders(ledger)
    holders.report("a", 0.0, want=64)
    assert not ledger.grant_for("a", "me", 0.0, TTL).unbounded  # the slow start counts
    holders.report("a", 0.1, want=64, succeeded=1)
    assert ledger.grant_for("a", "me", 0.1, TTL).unbounded


def test_a_429_lowers_the_rate_and_successes_bring_it_back() -> None:
    ledger = EndpointLedger(Bounds(16, requests_per_minute=1200, learn=True), now=0.0)
    holders = Holders(ledger)
    holders.report("a", 0.0, throttled=0.5)
    assert ledger.rates.per_minute()[0] == pytest.approx(1200 * 0.7)
    window = ledger.rates.buckets[0]
    assert isinstance(window, RateWindow) and window.next_time(1.0, 0.0) >= 0.5  # the pause
    holders.report("a", 1.0, succeeded=10)
    assert ledger.rates.per_minute()[0] == pytest.approx(1200 * 0.8)  # 1% of it a reply
    holders.report("a", 2.0, succeeded=1000)
    assert ledger.rates.per_minute()[0] == 1200  # never above the limit


def test_a_dead_holders_share_comes_back_when_its_lease_expires() -> None:
    ledger = EndpointLedger(Bounds(64, requests_per_minute=1200), now=0.0)
    holders = Holders(ledger)
    run(holders, ["a", "b", "c"], (100.0, 0, 0, 0), seconds=2.0, step=0.1)
    before = dict(holders.got)
    # c dies (SIGKILL: no release, no reports); a and b go on. Until its lease expires
    # its want still takes its share; then a and b get the whole rate.
    now, shares = 2.0, {"a": 0.0, "b": 0.0}
    while now < 2.0 + TTL + 10.0:
        for name in "ab":
            holders.report(name, now, wanted=(100.0, 0, 0, 0))
            got = holders.take(name, now)[0]
            if now >= 2.0 + TTL:
                shares[name] += got
        now += 0.1
        ledger.rebalance(now)
        for name in "ab":
            got = holders.take(name, now)[0]
            if now >= 2.0 + TTL:
                shares[name] += got
    assert "c" not in ledger.holders
    assert sum(shares.values()) >= 0.9 * 20 * 10  # the whole rate, between the two
    assert before["c"][0] > 0

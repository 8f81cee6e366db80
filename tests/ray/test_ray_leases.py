"""The lease protocol in-process (no Ray): a gateway object, several processes' leases,
channels that delay and reorder calls, requests scheduled at their times. What the
gateway actors and the processes that run agents do on Ray, driven directly and checked
at every step."""

from __future__ import annotations

import asyncio
import time

import pytest
from lease_support import KEY, InFlight, LocalChannel, leases
from ray_support import sim_model

from raygent import ModelOptions, UserMessage
from raygent.actors import Bounds, Gateway, RetryPolicy
from raygent.actors.gateway.endpoint_ledger import EndpointLedger, Report, partition, waterfill
from raygent.actors.gateway.lease import EndpointLease, _Slice
from raygent.actors.gateway.rate_budget import LATE, NO_RATES
from raygent.actors.gateway.sends import LeasedAdmission, admitted
from raygent.backend import AccessLayer, Limits, ModelRequest, ModelResponse
from raygent.errors import InvalidRequestError, RateLimitError
from raygent.sim import Fault, Match, Reply, Rule, serve


@pytest.mark.parametrize(
    ("total", "parts", "shares"),
    [(8, 2, [4, 4]), (5, 2, [3, 2]), (3, 5, [1, 1, 1]), (64, 1, [64])],
)
def test_replicas_split_a_bound_never_multiply_it(
    total: int, parts: int, shares: list[int]
) -> None:
    assert partition(total, parts) == shares


def test_fair_shares_are_equal_capped_by_want_and_spread_the_rest() -> None:
    assert waterfill(32, {"a": 64, "b": 64}) == {"a": 16, "b": 16}
    assert waterfill(32, {"a": 4, "b": 64, "c": 64}) == {"a": 4, "b": 14, "c": 14}
    assert sum(waterfill(32, {"a": 64, "b": 64, "c": 64}).values()) == 32
    assert waterfill(32, {"a": 0, "b": 10}) == {"a": 0, "b": 10}


def _report(seq: int, *, version: int = 0, want: int = 0, held: int = 0, **more: object) -> Report:
    return Report(seq, version, "me", want, held, min(held, want), **more)  # type: ignore[arg-type]


def test_the_ledger_counts_a_shrunk_slice_until_its_holder_says_it_is_free() -> None:
    ledger = EndpointLedger(Bounds(10), now=0.0)
    ledger.report("a", _report(1, want=10), "me", now=0.0, ttl=10)
    a = ledger.holders["a"]
    assert a.grant == a.occupied == 10
    ledger.report("b", _report(1, want=10), "me", now=0.0, ttl=10)
    b = ledger.holders["b"]
    assert (a.grant, b.grant) == (5, 0)  # a is asked to shrink; b waits for real room
    assert a.occupied == 10
    # A report from before `a` saw the smaller grant frees nothing...
    ledger.report("a", _report(2, version=a.version - 1, want=10, held=10), "me", 0.0, 10)
    assert a.occupied == 10 and b.grant == 0
    # ...one that saw it and is down to 7 in flight frees 3, which go to b.
    ledger.report("a", _report(3, version=a.version, want=10, held=7), "me", 0.0, 10)
    assert a.occupied == 7 and b.grant == 3
    # An older report arriving late (Ray reorders) changes nothing.
    ledger.report("a", _report(2, version=a.version, want=10, held=0), "me", 0.0, 10)
    assert a.occupied == 7
    # A holder that stops reporting loses its slice after the ttl.
    ledger.report("b", _report(2, version=b.version, want=10, held=3), "me", now=9.0, ttl=10)
    ledger.rebalance(now=10.5)
    assert "a" not in ledger.holders and b.grant == 10


def test_the_ledger_holds_the_tightest_declaration_of_its_live_holders() -> None:
    # The ledger was made by a process that declared 8; a model rebuilt with 2 brings
    # its own holder: from then on 2 holds for everyone, until that holder is gone.
    ledger = EndpointLedger(Bounds(8, requests_per_minute=600), now=0.0)
    ledger.report("old", _report(1, want=8), "me", 0.0, 10, bounds=Bounds(8, 600))
    old = ledger.holders["old"]
    assert old.grant == 8
    ledger.report("new", _report(1, want=8), "me", 0.0, 10, bounds=Bounds(2, 60))
    new = ledger.holders["new"]
    assert ledger.bound == 2 and ledger.stats(0.0)["limit"] == 2
    assert old.grant <= 1 and new.grant == 0  # nothing new until the old slice is freed
    # Old frees its slice on its own word, over two reports as ever (each answers the
    # grant it was sent): then new has the whole of the tighter bound.
    ledger.report("old", _report(2, version=old.version, want=0, held=0), "me", 0.0, 10)
    ledger.report("old", _report(3, version=old.version, want=0, held=0), "me", 0.0, 10)
    assert (old.grant, new.grant) == (0, 2)
    assert old.occupied + new.occupied == 2
    assert ledger.rates_ready_in(0.0) is None
    ledger.report(
        "new",
        _report(2, version=new.version, want=2, held=2, wanted=(100.0, 0, 0, 0)),
        "me",
        0.0,
        10,
    )
    assert new.rates[0] == 1.0  # the tighter rate: a second of 60 a minute, not of 600
    # The tight holder goes (released): the loose declaration left holds again.
    ledger.release("new", NO_RATES, now=1.0)
    assert ledger.bound == 8
    ledger.report("old", _report(4, version=old.version, want=8, held=0), "me", 1.0, 10)
    assert old.grant == 8


async def test_a_lone_lease_gets_the_whole_bound_and_asks_rarely() -> None:
    gateway = Gateway(lease_ttl=2.0)
    [lease] = leases(gateway, Bounds(32), 1, delay=0.002)
    flight = InFlight()

    async def worker() -> None:
        for _ in range(20):
            await flight.request(lease, 0.01)

    await asyncio.gather(*(worker() for _ in range(64)))
    channel = lease._slices[0].channel
    assert isinstance(channel, LocalChannel)
    assert flight.done == 1280 and flight.peak == 32  # the bound, reached, never passed
    assert channel.calls <= 10  # per lease, not per request


async def test_holders_at_four_times_the_bound_never_pass_it_and_share_it() -> None:
    gateway = Gateway(lease_ttl=2.0)
    holders = leases(gateway, Bounds(24), 3, delay=0.003)
    flight = InFlight()
    counts = [0, 0, 0]

    async def worker(i: int) -> None:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            await flight.request(holders[i], 0.005)
            counts[i] += 1

    await asyncio.gather(*(worker(i) for i in range(3) for _ in range(32)))
    assert flight.peak == 24
    assert min(counts) > 0.6 * max(counts)  # fair shares, give or take the rebalancing


async def test_a_holder_that_goes_silent_loses_its_slice_to_the_others() -> None:
    gateway = Gateway(lease_ttl=0.6)
    first, second = leases(gateway, Bounds(8), 2)
    flight = InFlight()
    await asyncio.gather(*(flight.request(first, 0.05) for _ in range(8)))
    for part in first._slices:  # the process dies: no release, no more reports
        assert part.pump is not None
        part.pump.cancel()
        part.channel.down = True  # type: ignore[attr-defined]
    await asyncio.sleep(0)
    started = time.monotonic()
    await asyncio.gather(*(flight.request(second, 0.02) for _ in range(16)))
    assert flight.peak == 8
    stats = await gateway.stats(KEY)
    assert stats["holders"] == 1 and time.monotonic() - started < 3


async def test_a_retry_after_pauses_every_holder_and_lowers_the_limit() -> None:
    gateway = Gateway(lease_ttl=2.0)
    first, second = leases(gateway, Bounds(8), 2)
    await asyncio.gather(*(InFlight().request(lease, 0.01) for lease in (first, second)))
    ticket = await first.admit()
    first.throttled(ticket, 0.5)
    first.done(ticket)
    started = time.monotonic()
    await asyncio.sleep(0.05)  # the news reaches the gateway, which tells second at once
    assert second.stats()["paused_for"] > 0.3
    ticket = await second.admit()
    assert time.monotonic() - started > 0.45  # the other holder waited out the pause
    second.done(ticket)
    assert (await gateway.stats(KEY))["limit"] < 8


async def test_a_request_rate_holds_across_holders() -> None:
    """Two holders of 600 a minute (10 a second): each sends what it is granted at the
    time it is granted for, so both together never have more than 10 in a second."""
    gateway = Gateway(lease_ttl=2.0)
    holders = leases(gateway, Bounds(64, requests_per_minute=600), 2)
    flight = InFlight()
    await asyncio.gather(*(flight.request(h, 0.0) for h in holders for _ in range(12)))
    assert flight.done == 24
    assert max(sum(1 for t in flight.sent if end - 1 < t <= end) for end in flight.sent) <= 10


def test_tokens_used_beyond_the_estimate_are_a_debt_the_next_takers_pay() -> None:
    ledger = EndpointLedger(Bounds(8, tokens_per_minute=6000, burst=1.0), now=0.0)
    ledger.report("a", _report(1, want=1, wanted=(0, 6000.0, 0, 0)), "me", now=0.0, ttl=10)
    assert ledger.holders["a"].rates[1] == 25  # a piece (a quarter second) at a time
    ledger.report("a", _report(2, want=1, settled=(0, -3000.0, 0, 0)), "me", now=0.0, ttl=10)
    ledger.report("b", _report(1, want=1, wanted=(0, 100.0, 0, 0)), "me", now=0.0, ttl=10)
    assert ledger.holders["b"].rates[1] == 0  # in debt: nothing until it is paid off
    # 3000 of debt below zero, then a's 25-token piece (the smallest ask), at 100 a second
    assert ledger.rates_ready_in(0.0) == pytest.approx(30.25)


async def test_a_restarted_gateway_grants_only_claims_until_old_leases_would_expire() -> None:
    old = Gateway(lease_ttl=0.5)
    [first] = leases(old, Bounds(8), 1)
    ticket = await first.admit()
    new = Gateway(lease_ttl=0.5, restarted=True)
    for part in first._slices:
        part.channel.gateway = new  # type: ignore[attr-defined]  # the actor came back
    [second] = leases(new, Bounds(8), 1, name="newcomer")
    waiting = asyncio.ensure_future(second.admit())
    first._slices[0].urgent.set()  # first reports to the new incarnation: its claim
    await asyncio.sleep(0.2)
    assert not waiting.done()  # nothing new is granted yet
    assert (await new.stats(KEY))["occupied"] >= 1  # first's claim is counted
    other = await asyncio.wait_for(waiting, 3)
    first.done(ticket)
    second.done(other)


async def test_a_cancelled_waiter_leaks_no_slot() -> None:
    gateway = Gateway(lease_ttl=2.0)
    [lease] = leases(gateway, Bounds(1), 1)
    held = await lease.admit()
    waiter = asyncio.ensure_future(lease.admit())
    await asyncio.sleep(0.01)
    waiter.cancel()
    lease.done(held)
    again = await asyncio.wait_for(lease.admit(), 2)
    lease.done(again)
    assert lease.stats()["in_use"] == 0


class _OneLease:
    """Admissions inside one in-process lease (the Ray backend's, with no rate lease)."""

    def __init__(self, lease: EndpointLease) -> None:
        self.lease = lease

    async def admit(self, request: ModelRequest, limits: Limits) -> LeasedAdmission:
        return await admitted(request, self.lease, None)


async def _send(
    lease: EndpointLease, model: object, text: str, policy: RetryPolicy
) -> ModelResponse:
    request = ModelRequest(model, [UserMessage(content=text)], ModelOptions())  # type: ignore[arg-type]
    return await AccessLayer(_OneLease(lease), policy).complete(request)


async def test_requests_retry_429s_and_return_other_errors_at_once() -> None:
    script = [
        Rule(match=Match(last_user="bad"), reply=Reply(fault=Fault(kind="status", status=400))),
        Rule(reply=Reply(fault=Fault(kind="status", status=429, retry_after=0.05)), times=2),
    ]
    async with serve(script) as sim:
        [lease] = leases(Gateway(lease_ttl=2.0), Bounds(4), 1)
        model = sim_model(sim)
        policy = RetryPolicy()
        response = await _send(lease, model, "hi", policy)
        # The simulator counts a reply once its handler ends, maybe after the client read it.
        stats = await sim.wait_until(lambda s: s.by_status.get(200) == 1, 10)
        assert stats.by_status == {429: 2, 200: 1}
        assert [a["status"] for a in response.attempts] == [429, 429, None]
        assert response.usage.requests == 3
        once = await _send(lease, model, "hi", policy)
        assert once.attempts == [] and once.usage.requests == 1
        sim.reset()
        with pytest.raises(InvalidRequestError):
            await _send(lease, model, "bad", policy)
        assert sim.stats().requests == 1


async def test_requests_give_up_after_their_attempts() -> None:
    script = [Rule(reply=Reply(fault=Fault(kind="status", status=429, retry_after=0.01)))]
    async with serve(script) as sim:
        [lease] = leases(Gateway(lease_ttl=2.0), Bounds(4), 1)
        with pytest.raises(RateLimitError) as given_up:
            await _send(lease, sim_model(sim), "hi", RetryPolicy(max_attempts=3))
        stats = sim.stats()
    assert stats.requests == 3
    assert given_up.value.details["attempts"] == 3


async def test_a_lease_the_gateway_cannot_answer_stops_admitting_at_its_deadline() -> None:
    gateway = Gateway(lease_ttl=0.4)
    [lease] = leases(gateway, Bounds(4), 1)
    lease.done(await lease.admit())
    lease._slices[0].channel.down = True  # type: ignore[attr-defined]
    await asyncio.sleep(0.5)  # past the lease's own deadline
    waiting = asyncio.ensure_future(lease.admit())
    await asyncio.sleep(0.1)
    assert not waiting.done()  # no slot without a valid lease
    lease._slices[0].channel.down = False  # type: ignore[attr-defined]
    lease.done(await asyncio.wait_for(waiting, 5))


def test_a_slice_sends_a_scheduled_request_at_its_time_and_drops_one_too_late() -> None:
    """A rate's slice holds requests granted with their times: one goes no sooner than
    its time, and one that could not go within `LATE` of it is dropped (counted)."""

    class Idle:  # a channel nobody calls: the slice is driven by hand
        name, bounds = "idle", Bounds(requests_per_minute=600)

    part = _Slice(Idle(), held_kinds=(True, False, False, False))  # type: ignore[arg-type]
    now = time.time()
    part.hand = (3.0, 0.0, 0.0, 0.0)
    part.due.extend([now - 10 * LATE, now - LATE / 4, now + 3600.0])
    need = (1.0, 0.0, 0.0, 0.0)
    assert part.affords(need)  # the first is long late: dropped; the second is due
    assert part.dropped == 1 and part.hand[0] == 2.0
    part.spend(need)
    assert list(part.due) == [now + 3600.0] and part.hand[0] == 1.0
    assert not part.affords(need)  # the last is an hour away
    assert part.affords(need, timely=False)  # it holds it all the same: asks for no more
    assert part.next_due(need, now) == now + 3600.0

"""A process's lease on one endpoint's bound: requests admitted here, inside its slice.

The process that runs agents (a driver, a batch runner) sends its HTTP requests itself.
Before each send it takes a slot of its `EndpointLease` (one per endpoint and event
loop); the slots come from the endpoint's gateway, which leases slices of the bound to
every process that has work. Taking and giving back a slot is local; the gateway hears
from a lease only when something changes (more wanted, slots given back, a 429) and
once per heartbeat, so its cost is per lease, not per request.

An endpoint whose bound is split over gateway replicas has one `_Slice` per replica;
the lease admits into whichever has room. Each slice has a pump: one long poll to its
gateway at a time (the heartbeat, and how grants and pauses arrive at once), plus a
short call when there is news to tell.

A slice is only used while its lease is valid by this process's clock (renewed by each
answer, counted from when the report was sent, so it ends here before it ends at the
gateway), so a process cut off from its gateway stops admitting before its slice can be
given to anyone else. One that stays idle for `idle_release` seconds gives its slices
back.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from raygent.backend import HeldBack, RateLimit, RateReading, crowded_pause, redacting_logger

from .endpoint_ledger import UNBOUNDED, Bounds, Grant, Report
from .rate_budget import LATE, NO_RATES, Limits, Rates

__all__ = ["ONE_REQUEST", "Channel", "EndpointLease", "GatewayUnavailable", "Ticket"]

log = redacting_logger("raygent.gateway")

ONE_REQUEST: Rates = (1.0, 0.0, 0.0, 0.0)  # what a request with no token estimate needs
AHEAD = 4  # peaks of demand a rate's lease asks for ahead (a piece at most comes)
PEAK_WINDOW = 1.0  # seconds a burst of demand is remembered in what a lease asks for


class GatewayUnavailable(Exception):
    """The gateway could not be reached (dead, restarting, closing)."""


class Channel(Protocol):
    """How a slice reaches its gateway replica (a Ray actor handle, or in-process)."""

    name: str
    bounds: Bounds

    def sync(self, report: Report, wait: bool) -> Awaitable[Grant]: ...

    def release(self, returned: Rates) -> Awaitable[None]: ...

    def release_nowait(self, returned: Rates) -> None: ...


@dataclass(eq=False)
class _Slice:
    channel: Channel
    grant: int = 0
    in_use: int = 0
    version: int = 0
    incarnation: str | None = None
    deadline: float = 0.0
    seq: int = 0
    succeeded: int = 0
    throttled: float | None = None
    hand: Rates = NO_RATES  # rate budget in hand (`rate_budget.KINDS`)
    settled: Rates = NO_RATES  # estimates minus usage, not yet reported
    held_kinds: tuple[bool, bool, bool, bool] = (False, False, False, False)
    observed: RateReading | None = None  # what the last reply's headers said
    unbounded: bool = False  # the gateway counts no slots (as of the last grant)
    told: RateLimit | None = None  # the limits they stated, as last reported
    pump: asyncio.Task[None] | None = None
    urgent: asyncio.Event = field(default_factory=asyncio.Event)
    generation: int = 0  # bumped when the slice is given back: older answers are void
    asked: int = 0  # the want last reported
    asked_rates: bool = False  # rate budget asked for, not yet received
    failures: int = 0
    unreachable_since: float | None = None
    due: deque[float] = field(default_factory=deque)  # when each request in hand may go
    dropped: int = 0  # scheduled requests not sent within `LATE` of their time
    hold_off: bool = False  # limits stated, no rate held yet: wait for the gateway

    def _drop_late(self, wall: float) -> None:
        """Requests granted for a time long past are void (sent now, they would crowd a
        window planned without them)."""
        due, late = self.due, 0
        while due and due[0] < wall - LATE:
            due.popleft()
            late += 1
        if late:
            self.hand = (self.hand[0] - late, *self.hand[1:])
            self.dropped += late

    def next_due(self, need: Rates, wall: float) -> float | None:
        """When the hand's next scheduled request may go, if that is what it waits for."""
        if self.due and need[0] and self.affords(need, timely=False) and self.due[0] > wall:
            return self.due[0]
        return None

    def room(self, now: float) -> int:
        if now >= self.deadline or self.hold_off:
            return 0
        # A rate's lease with no concurrency bound: no slot to wait for from the gateway.
        return UNBOUNDED if self.unbounded else self.grant - self.in_use

    def held(self, now: float) -> int:
        """What it may still be using: its grant while valid, what is in flight anyway."""
        return max(self.grant if now < self.deadline else 0, self.in_use)

    def affords(self, need: Rates, *, timely: bool = True) -> bool:
        """Its hand holds the request's rate budget, for every kind the gateway holds
        (and, `timely`, a scheduled request is due now)."""
        if timely and self.due and need[0]:
            wall = time.time()
            self._drop_late(wall)
            if self.due and self.due[0] > wall:
                return False
        hand = self.hand
        return all(not h or hand[k] >= need[k] for k, h in enumerate(self.held_kinds))

    def spend(self, need: Rates, sign: float = 1.0) -> None:
        held = self.held_kinds
        if sign > 0 and need[0] and self.due:
            self.due.popleft()
        self.hand = tuple(  # type: ignore[assignment]
            have - sign * need[k] if held[k] else have for k, have in enumerate(self.hand)
        )


@dataclass(eq=False)
class Ticket:
    """One admitted request: where its slot came from, and what it turned out to use."""

    slice: _Slice
    need: Rates  # its estimate: 1 request, its tokens, input and output tokens
    used: Rates | None = None  # what it really used, once answered (None: unknown)
    observed: RateReading | None = None  # what its reply's headers said
    ok: bool = False


@dataclass(eq=False)
class _Waiter:
    future: asyncio.Future[_Slice]
    need: Rates


class EndpointLease:
    """Admission for one endpoint in this event loop (see the module docstring)."""

    def __init__(
        self, channels: Sequence[Channel], *, idle_release: float = 2.0, give_up: float = 60.0
    ) -> None:
        self._slices = [
            _Slice(channel, held_kinds=_kinds(channel.bounds.rates)) for channel in channels
        ]
        self._waiters: deque[_Waiter] = deque()
        self._idle_release = idle_release
        self._give_up = give_up
        self.in_use = 0
        self.pause_until = 0.0
        self._peak, self._peak_at = 0, 0.0
        self._last_need: Rates = ONE_REQUEST  # the size of the requests ahead, as a guess
        self._idle_at: float | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._pause_timer: asyncio.TimerHandle | None = None
        self._due_timer: asyncio.TimerHandle | None = None
        self.held_back = HeldBack()  # requests a 429 told to wait longer than the pause
        # The tenants it has admitted for, by name, with their weights (`sends.admitted`):
        # the gateway weighs its share of the bound by them.
        self.tenants: dict[str, float] = {}

    # -- admission ------------------------------------------------------------------------

    async def admit(self, need: Rates = ONE_REQUEST) -> Ticket:
        """Wait for a slot (and the rate budget the request is estimated to need);
        hand the ticket back with `done` once the request has ended, however it ended."""
        return Ticket(await self._acquire(need), need)

    def admit_now(self, need: Rates = ONE_REQUEST) -> Ticket | None:
        """A slot at once if one is free (no pause, no one waiting), else None: the
        common case, with nothing to await."""
        if self._waiters or (chosen := self._pick(need)) is None:
            return None
        return Ticket(self._take(chosen, need), need)

    def done(self, ticket: Ticket) -> None:
        self._release(ticket)

    def holds_rate(self) -> bool:
        """Whether some gateway holds a rate for it (configured or learnt): a wait for
        its first grant, with none held, is no limit holding a request back."""
        return any(any(s.held_kinds) for s in self._slices)

    def pause_after(self, retry_after: float | None, reading: RateReading | None) -> float | None:
        """The pause a 429 with `retry_after` puts on this rate's holders: the window's
        slack when a known limit (configured, or stated by the 429's headers) is paced
        over windows (`crowded_pause`), else the retry-after."""
        if retry_after is None or not self.holds_rate():
            return retry_after
        bounds = self._slices[0].channel.bounds
        if any(bounds.rates) or (reading is not None and reading.limit() is not None):
            return crowded_pause(retry_after, bounds.burst)
        return retry_after

    def counts_tokens(self) -> bool:
        """Whether some gateway holds a token rate (a request then needs an estimate)."""
        return any(any(s.held_kinds[1:]) for s in self._slices)

    async def _acquire(self, need: Rates) -> _Slice:
        if not self._waiters and (chosen := self._pick(need)) is not None:
            return self._take(chosen, need)
        waiter = _Waiter(asyncio.get_running_loop().create_future(), need)
        self._waiters.append(waiter)
        self._demand_changed()
        self._await_due(self._waiters[0].need)
        try:
            return await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                # Handed a slot just as it was cancelled: pass it on.
                self._release(Ticket(waiter.future.result(), need, used=NO_RATES))
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def _pick(self, need: Rates) -> _Slice | None:
        now = time.monotonic()
        if now < self.pause_until:
            return None
        best, room = None, 0
        for candidate in self._slices:
            free = candidate.room(now)
            if free > room and candidate.affords(need):
                best, room = candidate, free
        return best

    def _take(self, chosen: _Slice, need: Rates) -> _Slice:
        self._last_need = need
        chosen.in_use += 1
        self.in_use += 1
        chosen.spend(need)
        self._idle_at = None
        self._note_demand()
        return chosen

    def _release(self, ticket: Ticket) -> None:
        held = ticket.slice
        was_over = held.in_use > held.grant and not held.unbounded  # asked to shrink: tell it
        held.in_use -= 1
        self.in_use -= 1
        if ticket.ok:
            held.succeeded += 1
            if held.succeeded == 1 and held.channel.bounds.learn and not held.unbounded:
                held.urgent.set()  # a slow start ends with a reply: tell the gateway now
        if ticket.used is not None:
            # Settled at the real usage: unused estimate back, usage beyond it a debt.
            # (A request cut short, used unknown, keeps what it took.)
            need, use = ticket.need, ticket.used
            unused = (need[0] - use[0], need[1] - use[1], need[2] - use[2], need[3] - use[3])
            held.settled = _sum(held.settled, unused, held.held_kinds)
        if ticket.observed is not None and ticket.ok:
            held.observed = ticket.observed
            if held.observed.limit() != held.told:
                held.urgent.set()  # the provider states other limits: tell the gateway
                self._ensure_pump(held)
                if held.channel.bounds.learn and not any(held.held_kinds):
                    # Limits learnt while nothing paces: no more unpaced sends until
                    # the gateway answers (with the rate to hold, or none).
                    held.hold_off = True
        if was_over:
            held.urgent.set()
        self._hand_over()
        if not self.in_use and not self._waiters:
            self._idle_at = time.monotonic()
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            loop = asyncio.get_running_loop()
            self._idle_timer = loop.call_later(self._idle_release, self._wake_pumps)

    def throttled(
        self, ticket: Ticket, retry_after: float | None, reading: RateReading | None = None
    ) -> None:
        """A 429 came back: pause here at once, and tell the gateway (which pauses every
        other holder and lowers the endpoint's adaptive limit)."""
        if retry_after:
            self.pause_until = max(self.pause_until, time.monotonic() + retry_after)
        held = ticket.slice
        held.throttled = max(held.throttled or 0.0, retry_after or 0.0)
        if reading is not None:
            held.observed, held.told = reading, None  # the 429's headers go with it
        ticket.used = (1.0, 0.0, 0.0, 0.0)  # a rejected request's tokens were not counted
        held.urgent.set()
        self._ensure_pump(held)

    async def paused(self) -> None:
        """Wait out the pause (a 429's Retry-After, here or at another holder)."""
        while (left := self.pause_until - time.monotonic()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(left)

    def _hand_over(self) -> None:
        while self._waiters:
            waiter = self._waiters[0]
            if waiter.future.done():
                self._waiters.popleft()
                continue
            chosen = self._pick(waiter.need)
            if chosen is None:
                break
            self._waiters.popleft()
            waiter.future.set_result(self._take(chosen, waiter.need))
        if self._waiters:
            self._demand_changed()
            left = self.pause_until - time.monotonic()
            if left > 0 and self._pause_timer is None:
                self._pause_timer = asyncio.get_running_loop().call_later(left, self._paused_out)
            self._await_due(self._waiters[0].need)

    def _paused_out(self) -> None:
        self._pause_timer = None
        self._hand_over()

    def _await_due(self, need: Rates) -> None:
        """The head waiter waits for a scheduled request's time: hand over then."""
        wall = time.time()
        times = [t for s in self._slices if (t := s.next_due(need, wall)) is not None]
        if not times:
            return
        at = min(times)
        if self._due_timer is not None:
            if self._due_timer.when() <= asyncio.get_running_loop().time() + (at - wall):
                return
            self._due_timer.cancel()
        self._due_timer = asyncio.get_running_loop().call_later(at - wall, self._due_out)

    def _due_out(self) -> None:
        self._due_timer = None
        self._hand_over()

    # -- demand ---------------------------------------------------------------------------

    def _note_demand(self) -> None:
        now = time.monotonic()
        demand = self.in_use + len(self._waiters)
        if demand >= self._peak or now - self._peak_at > PEAK_WINDOW:
            self._peak, self._peak_at = demand, now

    def _want(self) -> int:
        """Slots to ask each slice for: the recent peak of demand, a little more (so a
        growing burst does not wait for the gateway at each step), split evenly."""
        self._note_demand()
        peak = self._peak
        if not peak:
            return 0
        return math.ceil((peak + max(1, peak // 8)) / len(self._slices))

    def _demand_changed(self) -> None:
        """Requests wait: tell the slices that could do with more, once per change of
        want (a saturated lease does not report on every completion; the gateway's
        long poll brings more when there is more)."""
        now = time.monotonic()
        want = self._want()
        for candidate in self._slices:
            short = candidate.room(now) <= 0 and want > candidate.asked
            need = self._waiters[0].need if self._waiters else ONE_REQUEST
            broke = not candidate.affords(need, timely=False)
            broke = broke and not candidate.asked_rates
            if candidate.pump is None or candidate.pump.done():
                self._ensure_pump(candidate)
            elif short or broke:
                candidate.urgent.set()

    def _report(self, held: _Slice) -> Report:
        held.seq += 1
        wanted = self._rates_wanted(held)
        want = self._want()
        held.asked = want
        held.asked_rates = any(wanted)
        report = Report(
            seq=held.seq,
            version=held.version,
            incarnation=held.incarnation,
            want=want,
            held=held.held(time.monotonic()),
            in_use=held.in_use,
            succeeded=held.succeeded,
            throttled=held.throttled,
            wanted=wanted,
            settled=held.settled,
            observed=self._news(held),
            tenants=tuple(self.tenants.items()),
        )
        held.succeeded, held.throttled, held.settled = 0, None, NO_RATES
        if not self.in_use and not self._waiters:
            self.tenants.clear()  # idle: the next requests say whom it serves
        return report

    @staticmethod
    def _news(held: _Slice) -> RateReading | None:
        """The last reading, if it states other limits than the last one told (or is
        a 429's)."""
        reading = held.observed
        if reading is None:
            return None
        stated = reading.limit()
        if stated == held.told and held.throttled is None:
            return None
        held.told = stated
        return reading

    def _rates_wanted(self, held: _Slice) -> Rates:
        """Rate budget to ask this slice's gateway for: the waiters' share, and `AHEAD`
        times the recent peak of demand ahead (at the last request's size), less what is in hand.
        Where the rate binds, what comes is spent at once by the waiters; where it does
        not, the hand fills and the gateway hears from the lease once per peak, not per
        request (it grants a piece of the rate at most each time, so no one hoards)."""
        if not any(held.held_kinds):
            return NO_RATES
        parts = len(self._slices)
        self._note_demand()
        ahead = AHEAD * max(1, self._peak) / parts
        wanted = []
        for k, on in enumerate(held.held_kinds):
            waiting = sum(w.need[k] for w in self._waiters) / parts
            front = ahead * self._last_need[k]
            # Topped up when half the peak's worth is left, not after every request.
            low = waiting > 0 or held.hand[k] < front / 2
            wanted.append(max(0.0, waiting + front - held.hand[k]) if on and low else 0.0)
        return (wanted[0], wanted[1], wanted[2], wanted[3])

    # -- the pump -------------------------------------------------------------------------

    def _ensure_pump(self, held: _Slice) -> None:
        if held.pump is None or held.pump.done():
            held.urgent.set()  # the first call asks at once
            held.pump = asyncio.get_running_loop().create_task(self._pump(held))

    async def _pump(self, held: _Slice) -> None:
        pending: asyncio.Task[None] | None = None
        try:
            while True:
                if held.urgent.is_set():
                    held.urgent.clear()
                    await self._exchange(held, wait=False)
                if self._releasable():
                    if pending is not None:
                        pending.cancel()
                        pending = None
                    await self._give_back(held)
                    if not (self.in_use or self._waiters):
                        return
                    held.urgent.set()  # demand came back meanwhile: lease again
                    continue
                if pending is None:
                    pending = asyncio.ensure_future(self._exchange(held, wait=True))
                woke = asyncio.ensure_future(held.urgent.wait())
                await asyncio.wait({pending, woke}, return_when=asyncio.FIRST_COMPLETED)
                woke.cancel()
                if pending.done():
                    pending = None
        except asyncio.CancelledError:
            # The loop is closing (or the process): give the slice back, unawaited.
            with contextlib.suppress(Exception):
                held.channel.release_nowait(_sum(held.hand, held.settled, held.held_kinds))
            raise
        finally:
            if pending is not None:
                pending.cancel()

    async def _exchange(self, held: _Slice, wait: bool) -> None:
        sent, generation = time.monotonic(), held.generation
        report = self._report(held)
        try:
            grant = await held.channel.sync(report, wait)
        except GatewayUnavailable as exc:
            await self._unreachable(held, exc)
            return
        except Exception as exc:  # a bug: never leave the waiters hanging on it
            log.exception("lease exchange with %s failed", held.channel.name)
            await self._unreachable(held, exc)
            return
        held.failures, held.unreachable_since = 0, None
        if report.observed is not None:
            held.hold_off = False  # the gateway has heard the limits: its grant says
        if generation == held.generation:
            self._apply(held, grant, sent)

    def _apply(self, held: _Slice, grant: Grant, sent: float) -> None:
        if grant.held != held.held_kinds:
            # The gateway holds other kinds now (learnt, or no longer configured).
            held.hand = tuple(h if on else 0.0 for h, on in zip(held.hand, grant.held, strict=True))  # type: ignore[assignment]
            held.held_kinds = grant.held
            if not grant.held[0]:
                held.due.clear()
        held.hand = _sum(held.hand, grant.rates, held.held_kinds)
        if held.held_kinds[0]:
            held.due.extend(grant.due)
        fresh = grant.incarnation != held.incarnation
        if any(grant.rates):
            held.asked_rates = False
        if fresh or grant.version >= held.version:
            held.incarnation, held.version = grant.incarnation, grant.version
            held.grant, held.unbounded = grant.slots, grant.unbounded
            held.deadline = max(held.deadline, sent + grant.ttl)
            if grant.pause:
                self.pause_until = max(self.pause_until, time.monotonic() + grant.pause)
        self._hand_over()

    async def _unreachable(self, held: _Slice, exc: Exception) -> None:
        now = time.monotonic()
        if held.unreachable_since is None:
            held.unreachable_since = now
            log.warning("model gateway %s unreachable (%s); retrying", held.channel.name, exc)
        elif now - held.unreachable_since > self._give_up and self._waiters:
            error = GatewayUnavailable(
                f"the model gateway {held.channel.name} has been unreachable for "
                f"{now - held.unreachable_since:.0f} s"
            )
            for waiter in self._waiters:
                if not waiter.future.done():
                    waiter.future.set_exception(error)
            self._waiters.clear()
        held.failures += 1
        await asyncio.sleep(min(1.0, 0.05 * 2 ** min(held.failures, 5)))
        held.urgent.set()

    def _releasable(self) -> bool:
        idle_at = self._idle_at
        return (
            idle_at is not None
            and not self.in_use
            and not self._waiters
            and time.monotonic() - idle_at >= self._idle_release
        )

    async def _give_back(self, held: _Slice) -> None:
        returned = _sum(held.hand, held.settled, held.held_kinds)
        held.generation += 1
        held.grant, held.version, held.deadline, held.asked = 0, 0, 0.0, 0
        held.hand = held.settled = NO_RATES
        held.due.clear()
        with contextlib.suppress(Exception):
            await held.channel.release(returned)

    def _wake_pumps(self) -> None:
        for candidate in self._slices:
            if candidate.pump is not None and not candidate.pump.done():
                candidate.urgent.set()

    def stats(self) -> dict[str, float]:
        now = time.monotonic()
        return {
            "slots": sum(s.grant for s in self._slices if now < s.deadline),
            "in_use": self.in_use,
            "waiting": len(self._waiters),
            "paused_for": max(0.0, self.pause_until - now),
            "dropped": sum(s.dropped for s in self._slices),
        }


def _sum(a: Rates, b: Rates, kinds: tuple[bool, ...]) -> Rates:
    """a + b for the kinds held (0 for the others)."""
    return tuple(x + y if on else 0.0 for x, y, on in zip(a, b, kinds, strict=True))  # type: ignore[return-value]


def _kinds(limits: Limits) -> tuple[bool, bool, bool, bool]:
    return (bool(limits[0]), bool(limits[1]), bool(limits[2]), bool(limits[3]))

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

from raygent.backend import redacting_logger

from .endpoint_ledger import Bounds, Grant, Report

__all__ = ["Channel", "EndpointLease", "GatewayUnavailable", "Ticket"]

log = redacting_logger("raygent.gateway")

PEAK_WINDOW = 1.0  # seconds a burst of demand is remembered in what a lease asks for


class GatewayUnavailable(Exception):
    """The gateway could not be reached (dead, restarting, closing)."""


class Channel(Protocol):
    """How a slice reaches its gateway replica (a Ray actor handle, or in-process)."""

    name: str
    bounds: Bounds

    def sync(self, report: Report, wait: bool) -> Awaitable[Grant]: ...

    def release(self, returned: tuple[float, float]) -> Awaitable[None]: ...

    def release_nowait(self, returned: tuple[float, float]) -> None: ...


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
    requests: float = 0.0  # rate budget in hand
    tokens: float = 0.0
    token_debt: float = 0.0
    pump: asyncio.Task[None] | None = None
    urgent: asyncio.Event = field(default_factory=asyncio.Event)
    generation: int = 0  # bumped when the slice is given back: older answers are void
    asked: int = 0  # the want last reported
    asked_rates: bool = False  # rate budget asked for, not yet received
    failures: int = 0
    unreachable_since: float | None = None

    def room(self, now: float) -> int:
        return self.grant - self.in_use if now < self.deadline else 0

    def held(self, now: float) -> int:
        """What it may still be using: its grant while valid, what is in flight anyway."""
        return max(self.grant if now < self.deadline else 0, self.in_use)

    def affords(self, estimate: float) -> bool:
        bounds = self.channel.bounds
        if bounds.requests_per_minute and self.requests < 1:
            return False
        return not bounds.tokens_per_minute or self.tokens >= min(
            estimate, bounds.tokens_per_minute
        )


@dataclass(eq=False)
class Ticket:
    """One admitted request: where its slot came from, and what it turned out to use."""

    slice: _Slice
    estimate: float
    used_tokens: float | None = None
    ok: bool = False


@dataclass(eq=False)
class _Waiter:
    future: asyncio.Future[_Slice]
    estimate: float


class EndpointLease:
    """Admission for one endpoint in this event loop (see the module docstring)."""

    def __init__(
        self, channels: Sequence[Channel], *, idle_release: float = 2.0, give_up: float = 60.0
    ) -> None:
        self._slices = [_Slice(channel) for channel in channels]
        self._waiters: deque[_Waiter] = deque()
        self._idle_release = idle_release
        self._give_up = give_up
        self.in_use = 0
        self.pause_until = 0.0
        self._peak, self._peak_at = 0, 0.0
        self._idle_at: float | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._pause_timer: asyncio.TimerHandle | None = None

    # -- admission ------------------------------------------------------------------------

    async def admit(self, estimate: float = 0.0) -> Ticket:
        """Wait for a slot (and the rate budget, `estimate` tokens); hand the ticket
        back with `done` once the request has ended, however it ended."""
        return Ticket(await self._acquire(estimate), estimate)

    def admit_now(self, estimate: float = 0.0) -> Ticket | None:
        """A slot at once if one is free (no pause, no one waiting), else None: the
        common case, with nothing to await."""
        if self._waiters or (chosen := self._pick(estimate)) is None:
            return None
        return Ticket(self._take(chosen, estimate), estimate)

    def done(self, ticket: Ticket) -> None:
        self._release(ticket)

    async def _acquire(self, estimate: float) -> _Slice:
        if not self._waiters and (chosen := self._pick(estimate)) is not None:
            return self._take(chosen, estimate)
        waiter = _Waiter(asyncio.get_running_loop().create_future(), estimate)
        self._waiters.append(waiter)
        self._demand_changed()
        try:
            return await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                # Handed a slot just as it was cancelled: pass it on.
                self._release(Ticket(waiter.future.result(), estimate))
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def _pick(self, estimate: float) -> _Slice | None:
        now = time.monotonic()
        if now < self.pause_until:
            return None
        best, room = None, 0
        for candidate in self._slices:
            free = candidate.room(now)
            if free > room and candidate.affords(estimate):
                best, room = candidate, free
        return best

    def _take(self, chosen: _Slice, estimate: float) -> _Slice:
        chosen.in_use += 1
        self.in_use += 1
        if chosen.channel.bounds.requests_per_minute:
            chosen.requests -= 1
        if chosen.channel.bounds.tokens_per_minute:
            chosen.tokens -= estimate
        self._idle_at = None
        self._note_demand()
        return chosen

    def _release(self, ticket: Ticket) -> None:
        held = ticket.slice
        was_over = held.in_use > held.grant  # it was asked to shrink: tell it sooner
        held.in_use -= 1
        self.in_use -= 1
        if ticket.ok:
            held.succeeded += 1
        if held.channel.bounds.tokens_per_minute and ticket.used_tokens is not None:
            held.token_debt += ticket.used_tokens - ticket.estimate
        if was_over:
            held.urgent.set()
        self._hand_over()
        if not self.in_use and not self._waiters:
            self._idle_at = time.monotonic()
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            loop = asyncio.get_running_loop()
            self._idle_timer = loop.call_later(self._idle_release, self._wake_pumps)

    def throttled(self, ticket: Ticket, retry_after: float | None) -> None:
        """A 429 came back: pause here at once, and tell the gateway (which pauses every
        other holder and lowers the endpoint's adaptive limit)."""
        if retry_after:
            self.pause_until = max(self.pause_until, time.monotonic() + retry_after)
        held = ticket.slice
        held.throttled = max(held.throttled or 0.0, retry_after or 0.0)
        if held.channel.bounds.tokens_per_minute:
            ticket.used_tokens = 0.0  # the provider did not count a rejected request
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
            chosen = self._pick(waiter.estimate)
            if chosen is None:
                break
            self._waiters.popleft()
            waiter.future.set_result(self._take(chosen, waiter.estimate))
        if self._waiters:
            self._demand_changed()
            left = self.pause_until - time.monotonic()
            if left > 0 and self._pause_timer is None:
                self._pause_timer = asyncio.get_running_loop().call_later(left, self._paused_out)

    def _paused_out(self) -> None:
        self._pause_timer = None
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
            broke = not candidate.affords(0.0) and not candidate.asked_rates
            if candidate.pump is None or candidate.pump.done():
                self._ensure_pump(candidate)
            elif short or broke:
                candidate.urgent.set()

    def _report(self, held: _Slice) -> Report:
        held.seq += 1
        bounds = held.channel.bounds
        waiting = len(self._waiters)
        per_slice = math.ceil(waiting / len(self._slices)) if waiting else 0
        requests_wanted = tokens_wanted = 0.0
        if bounds.requests_per_minute and (waiting or held.requests < 1):
            requests_wanted = max(0.0, per_slice + 1 - held.requests)
        if bounds.tokens_per_minute and waiting:
            needed = sum(w.estimate for w in self._waiters) / len(self._slices)
            tokens_wanted = max(0.0, needed - held.tokens)
        want = self._want()
        held.asked = want
        held.asked_rates = bool(requests_wanted or tokens_wanted)
        report = Report(
            seq=held.seq,
            version=held.version,
            incarnation=held.incarnation,
            want=want,
            held=held.held(time.monotonic()),
            in_use=held.in_use,
            succeeded=held.succeeded,
            throttled=held.throttled,
            requests_wanted=requests_wanted,
            tokens_wanted=tokens_wanted,
            token_debt=held.token_debt,
        )
        held.succeeded, held.throttled, held.token_debt = 0, None, 0.0
        return report

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
                held.channel.release_nowait((held.requests, held.tokens))
            raise
        finally:
            if pending is not None:
                pending.cancel()

    async def _exchange(self, held: _Slice, wait: bool) -> None:
        sent, generation = time.monotonic(), held.generation
        try:
            grant = await held.channel.sync(self._report(held), wait)
        except GatewayUnavailable as exc:
            await self._unreachable(held, exc)
            return
        except Exception as exc:  # a bug: never leave the waiters hanging on it
            log.exception("lease exchange with %s failed", held.channel.name)
            await self._unreachable(held, exc)
            return
        held.failures, held.unreachable_since = 0, None
        if generation == held.generation:
            self._apply(held, grant, sent)

    def _apply(self, held: _Slice, grant: Grant, sent: float) -> None:
        held.requests += grant.requests
        held.tokens += grant.tokens
        fresh = grant.incarnation != held.incarnation
        if grant.requests or grant.tokens:
            held.asked_rates = False
        if fresh or grant.version >= held.version:
            held.incarnation, held.version = grant.incarnation, grant.version
            held.grant = grant.slots
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
        returned = (held.requests, held.tokens)
        held.generation += 1
        held.grant, held.version, held.deadline, held.asked = 0, 0, 0.0, 0
        held.requests = held.tokens = 0.0
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
        }

"""A process's lease on a job's budget: requests reserved here, inside its slices.

The job's budget is kept by a gateway (`budget_book.BudgetBook`). Each process that runs
the job's agents holds a `BudgetLease` (one per job and event loop): a request reserves
its worst case within what this lease was granted, locally, and settles there; the
gateway hears from the lease only when a reservation does not fit (it asks for a slice
big enough for the requests it has in flight, four times over, or for those it reserves
in a heartbeat period at its recent rate, up to `MAX_SHARE` of the budget, whichever is
larger), every `ttl / 3` seconds (a heartbeat that renews the
lease and reports the spend), and when it goes idle (it gives back what it does not use).
So a request costs no remote call, and a busy holder about one call a heartbeat period.

A reservation that does not fit waits for this holder's own requests in flight to settle
when they would make room; else the lease asks for more. Refused (the rest is granted to
other holders), it gives back what it does not use and asks again shortly; it fails
only once the gateway says the budget is exhausted (the need could not be met even if
every request in flight settled at nothing).

A lease is used only while it is valid by this process's clock (renewed by each answer,
counted from when the claim was sent): a process cut off from its gateway stops
reserving before its grant can be counted free again.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
import uuid
from collections.abc import Awaitable
from typing import Protocol

from raygent.backend import (
    Account,
    Amount,
    Budget,
    BudgetExceededError,
    ProviderConnectionError,
    redacting_logger,
)

from .budget_book import Claim, Slice
from .lease import GatewayUnavailable

__all__ = ["BudgetChannel", "BudgetLease"]

log = redacting_logger("raygent.gateway")

MIN_SLICE = 16  # requests' worth a lease asks for at least
SLICE_FACTOR = 4  # a slice: this many times the requests in flight here
MAX_SHARE = 0.125  # a claim asks for at most this share of the budget (others need some)
# A holder that goes idle tells the gateway at most this often (seconds); a batch runner
# tells it at once when its share ends (`flush`).
IDLE_TELL_EVERY = 0.25


class BudgetChannel(Protocol):
    """How a lease reaches the gateway that keeps its job's budget."""

    def claim(self, claim: Claim) -> Awaitable[Slice]: ...

    def release_nowait(self, claim: Claim) -> None: ...


class BudgetLease:
    """A job's budget as this process holds it (a `raygent.budgets.BudgetLedger`)."""

    scope = "job"

    def __init__(
        self, budget: Budget, channel: BudgetChannel, *, idle_release: float = 2.0
    ) -> None:
        self.budget = budget
        self._channel = channel
        self._idle_release = idle_release
        self._limited = [not math.isinf(limit) for limit in budget.limits]
        self.exhausted: BudgetExceededError | None = None
        self._lock = asyncio.Lock()
        self._pump: asyncio.Task[None] | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self._poll = 1.0  # the longest wait before asking again (a third of the ttl)
        self.syncs = 0
        self._fresh()

    def _fresh(self) -> None:
        """A new lease (the first, or after the last one was given back)."""
        self.holder_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._granted = [0.0] * 5
        self.account = Account([0.0 if held else math.inf for held in self._limited])
        self._seq = 0
        self._incarnation: str | None = None
        self._deadline = 0.0
        self._in_flight = 0
        self._idle_at = time.monotonic()
        self._largest: Amount | None = None
        self._told_busy = False  # the last claim had reservations in flight
        self._telling: asyncio.Task[None] | None = None
        self._taken = 0  # reservations made, and (when, how many) at the last claim
        self._mark = (time.monotonic(), 0)
        self._synced_at = 0.0

    # -- the ledger ----------------------------------------------------------------------

    async def reserve(self, amount: Amount) -> None:
        polls = 0
        while not self._take(amount):
            if self.exhausted is None:
                async with self._lock:
                    if self._take(amount):
                        return
                    # Asking with nothing in flight here, it keeps only what it spent, so
                    # that what it does not use can go to whoever needs it.
                    await self._sync(self._need(amount), give_back=not self._in_flight)
                if self._take(amount):
                    return
            if self._in_flight and self._fits_alone(amount):
                await self._settled()  # its own requests in flight make room as they end
            elif self.exhausted is not None:
                raise self._refused(amount)
            elif self._in_flight:
                await self._settled()
            else:  # the rest is granted to others: ask again shortly
                polls += 1
                await asyncio.sleep(min(self._poll, 0.01 * 2 ** min(polls, 8)))

    def _refused(self, amount: Amount) -> BudgetExceededError:
        account = self.account
        short = account.short(amount)
        error = account.exceeded(amount, 0 if short is None else short, "job")
        self.exhausted = self.exhausted or error
        return error

    def _fits_alone(self, amount: Amount) -> bool:
        return self.account.short(amount, in_flight=False) is None

    def _valid(self) -> bool:
        return time.monotonic() < self._deadline

    async def _settled(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def settle(self, amount: Amount, actual: Amount) -> None:
        self.account.settle(amount, actual)
        self._in_flight -= 1
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
        if not self._in_flight:
            self._idle_at = time.monotonic()
            if self._told_busy and (self._telling is None or self._telling.done()):
                # The gateway counts requests in flight here that are over: tell it (once
                # per busy spell, not per request, and at most every IDLE_TELL_EVERY: a
                # runner at zero latency is idle for a moment many times a second), so
                # the job's standing is current.
                wait = self._synced_at + IDLE_TELL_EVERY - time.monotonic()
                self._telling = asyncio.get_running_loop().create_task(self._tell_idle(wait))

    async def standing(self) -> tuple[Amount, Amount]:
        account = self.account
        return tuple(account.spent), tuple(account.reserved)  # type: ignore[return-value]

    def _take(self, amount: Amount) -> bool:
        if time.monotonic() >= self._deadline or self.account.short(amount) is not None:
            return False
        self.account.reserve(amount)
        self._in_flight += 1
        self._taken += 1
        largest = self._largest
        if largest is None or amount[0] > largest[0] or amount[1] > largest[1]:
            self._largest = amount
        return True

    def _need_alone(self, need: Amount) -> Amount:
        """The need once this holder keeps only what it spent and has in flight."""
        room = self.account.room() if self._valid() else (0.0,) * 5
        return tuple(  # type: ignore[return-value]
            need[i] + max(0.0, room[i]) if self._limited[i] else 0.0 for i in range(5)
        )

    def _need(self, amount: Amount) -> Amount:
        room = self.account.room() if time.monotonic() < self._deadline else (0.0,) * 5
        return tuple(  # type: ignore[return-value]
            max(0.0, amount[i] - room[i]) if self._limited[i] else 0.0 for i in range(5)
        )

    # -- talking to the gateway -----------------------------------------------------------

    def _claim(self, need: Amount, release: bool = False, give_back: bool = False) -> Claim:
        self._seq += 1
        account = self.account
        per_request = self._largest or need
        now = time.monotonic()
        since, taken = self._mark
        self._mark = (now, self._taken)
        # The requests this holder reserves in a heartbeat period at its recent rate.
        ahead = math.ceil((self._taken - taken) / (now - since) * self._poll) if now > since else 0
        count = max(MIN_SLICE, SLICE_FACTOR * (self._in_flight + 1))
        limits = self.budget.limits
        want = tuple(
            max(need[i], per_request[i] * count, min(per_request[i] * ahead, limits[i] * MAX_SHARE))
            if self._limited[i] and not release
            else 0.0
            for i in range(5)
        )
        self._told_busy = any(account.reserved)
        return Claim(
            seq=self._seq,
            incarnation=self._incarnation,
            granted=tuple(self._granted),
            spent=tuple(account.spent),
            reserved=tuple(account.reserved),
            want=want,
            need=need if not release else (0.0,) * 5,
            release=release,
            give_back=give_back,
        )

    async def _sync(self, need: Amount, release: bool = False, give_back: bool = False) -> None:
        sent = time.monotonic()
        if give_back:
            need = self._need_alone(need)
        claim = self._claim(need, release, give_back)
        try:
            answer = await self._channel.claim(claim)
        except GatewayUnavailable as exc:
            raise ProviderConnectionError(
                f"the gateway keeping the job's budget could not be reached ({exc}); "
                "the request was not sent",
                provider="raygent",
            ) from None
        self.syncs += 1
        self._synced_at = time.monotonic()
        self._incarnation = answer.incarnation
        self._granted = list(answer.granted)
        for i in range(5):
            if self._limited[i]:
                self.account.limits[i] = self._granted[i]
        self._deadline = sent + answer.ttl
        self._poll = answer.ttl / 3
        if answer.exhausted and self.exhausted is None:
            self.exhausted = BudgetExceededError(
                "the job's budget is exhausted: another request did not fit",
                budget="job",
            )
        if not release:
            self._ensure_pump(answer.ttl)

    async def flush(self) -> None:
        """Tell the gateway now if this holder is idle with reservations it reported
        (a batch runner's share ended: the job's standing is read next)."""
        telling = self._telling
        if telling is not None and not telling.done():
            telling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await telling
        await self._tell_idle()

    async def _tell_idle(self, wait: float = 0.0) -> None:
        if wait > 0:
            await asyncio.sleep(wait)
        async with self._lock:
            if self._in_flight or not self._told_busy:
                return
            with contextlib.suppress(ProviderConnectionError):
                await self._sync((0.0,) * 5)

    # -- the heartbeat --------------------------------------------------------------------

    def _ensure_pump(self, ttl: float) -> None:
        if self._pump is None or self._pump.done():
            self._pump = asyncio.get_running_loop().create_task(self._beat(ttl / 3))

    async def _beat(self, every: float) -> None:
        try:
            while True:
                await asyncio.sleep(every)
                async with self._lock:
                    idle = not self._in_flight and (
                        time.monotonic() - self._idle_at >= self._idle_release
                    )
                    if idle:
                        self._deadline = 0.0  # no reservation here until given back
                    try:
                        await self._sync((0.0,) * 5, release=idle)
                    except ProviderConnectionError as exc:
                        log.warning("%s; retrying", exc)
                        continue
                    if idle:
                        self._fresh()
                        return
        except asyncio.CancelledError:
            # The loop is closing (or the process): give the lease back, unawaited.
            with contextlib.suppress(Exception):
                self._channel.release_nowait(self._claim((0.0,) * 5, release=True))
            raise

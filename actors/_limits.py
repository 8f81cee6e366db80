"""The limits a model gateway holds: concurrency slots, rate buckets, a shared pause.

Plain asyncio, no Ray: they live on the gateway actor's event loop, and tests drive them
in-process.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

__all__ = ["Pause", "Slots", "TokenBucket", "partition"]


def partition(total: int, parts: int) -> list[int]:
    """Split `total` into at most `parts` positive shares that add up to `total`
    (floor/ceil): replicas share a bound, they never multiply it."""
    if total <= 0 or parts <= 0:
        raise ValueError(f"cannot split {total} into {parts} parts")
    parts = min(parts, total)
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


class Slots:
    """A FIFO semaphore whose limit adapts: it shrinks when the provider says "too many"
    (429) and grows back by one slot per `limit` successes (AIMD), never past `ceiling`.

    So a provider whose real cap is below the declared bound sees fewer rejected requests,
    instead of every waiting request bouncing off it again after each pause.
    """

    def __init__(self, ceiling: int | None) -> None:
        self.ceiling = ceiling
        self.limit = float(ceiling) if ceiling is not None else float("inf")
        self.in_use = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def acquire(self) -> None:
        if self.in_use < self._allowed and not self._waiters:
            self.in_use += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot was handed over just as we were cancelled
            else:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        self.in_use -= 1
        self._hand_over()

    def shrink(self) -> None:
        """A 429: allow one fewer than were in flight when it came back."""
        if self.ceiling is not None:
            self.limit = max(1.0, min(self.limit, float(self.in_use)) - 1.0)

    def grow(self) -> None:
        """A success: add back a slot over `limit` successes."""
        if self.ceiling is not None and self.limit < self.ceiling:
            self.limit = min(float(self.ceiling), self.limit + 1.0 / self.limit)
            self._hand_over()

    @property
    def _allowed(self) -> float:
        return self.limit if self.ceiling is None else max(1, int(self.limit))

    def _hand_over(self) -> None:
        while self._waiters and self.in_use < self._allowed:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_use += 1
                waiter.set_result(None)


class Pause:
    """Every request waits until `until` (monotonic seconds): one Retry-After pauses the
    whole gateway, not only the request that got it."""

    def __init__(self) -> None:
        self.until = 0.0

    def push(self, seconds: float) -> None:
        self.until = max(self.until, time.monotonic() + seconds)

    async def wait(self) -> None:
        # A deadline, not an event: a later 429 may push it further while we sleep.
        while (left := self.until - time.monotonic()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(left)


class TokenBucket:
    """`per_minute` units a minute, refilled continuously, taken in FIFO order.

    Takers may put the bucket in debt (`settle` with a real count above the estimate):
    later takers then wait for the refill to pay it off.
    """

    def __init__(self, per_minute: float) -> None:
        if per_minute <= 0:
            raise ValueError(f"a rate must be positive, not {per_minute}")
        self.capacity = float(per_minute)
        self.level = self.capacity
        self._rate = self.capacity / 60.0
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self._stamp) * self._rate)
        self._stamp = now

    async def take(self, amount: float) -> None:
        amount = min(amount, self.capacity)  # a request larger than a minute's worth still goes
        async with self._lock:  # FIFO: a large request is not starved by small ones
            self._refill()
            while self.level < amount:
                await asyncio.sleep((amount - self.level) / self._rate)
                self._refill()
            self.level -= amount

    def settle(self, estimated: float, actual: float) -> None:
        """Correct an earlier `take(estimated)` with what the request really used."""
        self._refill()
        self.level = min(self.capacity, self.level + estimated - actual)

"""A smooth bucket: one dimension of a rate, refilled continuously.

`capacity = rate * burst` (the share of `burst` seconds) and the level refills at `rate`
per second up to it. A request takes its estimate when it goes (`take`), even past what
is there (the level may go below zero: a debt the refill pays first), and is settled at
its real use after (`settle`: the difference comes back, or is owed); what an error
reply did not use comes back whole (`settle(reserved, 0)`). A request waits until the
level holds its amount (`ready_in`); one larger than the capacity waits for a full
bucket and goes into debt. Time is given, never read: the bucket is pure arithmetic.
"""

from __future__ import annotations

__all__ = ["Bucket"]


class Bucket:
    """One dimension's level, rate (per second) and capacity."""

    __slots__ = ("capacity", "level", "rate", "stamp")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError("a bucket's rate and burst are positive")
        self.rate = rate
        self.capacity = rate * burst
        self.level = self.capacity  # a provider starts a key with its burst
        self.stamp = now

    def __repr__(self) -> str:
        return f"Bucket(rate={self.rate:g}/s, level={self.level:g}/{self.capacity:g})"

    def refill(self, now: float) -> None:
        if now > self.stamp:
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
            self.stamp = now

    def ready_in(self, amount: float, now: float) -> float:
        """Seconds until `amount` may be taken (0: now). More than the capacity waits
        for a full bucket."""
        self.refill(now)
        need = min(amount, self.capacity) - self.level
        return 0.0 if need <= 1e-9 else need / self.rate

    def take(self, amount: float, now: float) -> None:
        """Take `amount` (a reservation), whatever the level: it may go into debt."""
        self.refill(now)
        self.level -= amount

    def settle(self, reserved: float, used: float, now: float) -> None:
        """A reservation of `reserved` that used `used`: the rest comes back (capped at
        the capacity), or the excess is owed."""
        self.refill(now)
        self.level = min(self.capacity, self.level + reserved - used)

    def set_rate(self, rate: float, burst: float, now: float) -> None:
        """A new rate (a learnt one): the level is kept, capped at the new capacity."""
        if rate <= 0 or burst <= 0:
            raise ValueError("a bucket's rate and burst are positive")
        self.refill(now)
        self.rate = rate
        self.capacity = rate * burst
        self.level = min(self.level, self.capacity)

    def empty(self, now: float) -> None:
        """Nothing left now (a 429 said so): what follows waits for the refill."""
        self.refill(now)
        self.level = min(self.level, 0.0)

"""An endpoint's rate limits as its gateway keeps them: smooth buckets, leased in pieces.

Plain Python (no Ray, no asyncio, the clock passed in): `EndpointLedger` keeps one
`RateBudget` per endpoint and tests drive it directly.

Four limits, as providers count them: requests, tokens, input tokens and output tokens
per minute (`KINDS`). Each held limit is a bucket that refills continuously at this
gateway's share of the rate and holds `HEADROOM` of `burst` seconds of it, so no more
than that plus the rate goes out in any stretch of time (providers enforce a minute's
limit over much shorter periods, in buckets of about a second). Half the provider's
burst, not all of it: a bucket that let the provider's own empty would meet every send
delayed on its way (a loaded process, a slow grant) with a 429; half leaves it half a
second of slack, and costs nothing of the rate. Holders are granted rate budget in pieces of
at most `PIECE` seconds' worth, shared fairly between those who wait, so no process
hoards a minute: what a process holds and has not spent came out of the bucket, and
comes back when it releases its lease, or is lost for at most a piece when it dies.

A limit is the configured one (the model's `rate_limit`), lowered by what the provider
says (the limits its replies' headers name: configured is the ceiling) or, with nothing
configured, what the provider says. A 429 lowers every held rate by `DECREASE`; each
answered request brings it back by `INCREASE` of the limit (additive increase,
multiplicative decrease).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["KINDS", "NO_LIMITS", "NO_RATES", "PIECE", "Bucket", "Limits", "RateBudget", "Rates"]

KINDS = ("requests", "tokens", "input_tokens", "output_tokens")
Rates = tuple[float, float, float, float]  # one amount of each kind, in KINDS' order
Limits = tuple[float | None, float | None, float | None, float | None]  # per minute
NO_RATES: Rates = (0.0, 0.0, 0.0, 0.0)
NO_LIMITS: Limits = (None, None, None, None)

PIECE = 0.25  # seconds of a rate granted to one holder at once, at most
HEADROOM = 0.5  # of the burst the provider allows, what the gateway's buckets hold
DECREASE = 0.7  # a 429 multiplies every held rate by this
FLOOR = 0.2  # ... never below this fraction of the limit
INCREASE = 0.002  # each answered request gives back this fraction of the limit


class Bucket:
    """`per_minute` units a minute, refilled continuously, holding `burst` seconds of
    them (a request's worth at least). Synchronous: the gateway's loop asks, it never
    waits here. Goes into debt when usage beats the estimates taken."""

    unit = 1.0  # the least a bucket holds: one request

    def __init__(self, per_minute: float, burst: float, now: float) -> None:
        self.stamp, self.level = now, 0.0
        self._size(per_minute, burst)
        self.level = self.capacity  # starts with a burst's worth, not a minute's

    def resize(self, per_minute: float, burst: float, now: float) -> None:
        """Refill at `per_minute` from now on; what it holds is kept, up to the new size."""
        self.refill(now)
        self._size(per_minute, burst)
        self.level = min(self.level, self.capacity)

    def _size(self, per_minute: float, burst: float) -> None:
        self.per_minute = per_minute
        self.rate = per_minute / 60.0
        self.capacity = max(self.unit, self.rate * burst * HEADROOM)

    def refill(self, now: float) -> None:
        if now > self.stamp:
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
            self.stamp = now

    def take(self, wanted: float, now: float) -> float:
        self.refill(now)
        given = max(0.0, min(wanted, self.level))
        self.level -= given
        return given

    def put(self, amount: float, now: float) -> None:
        """Give back (amount > 0) or charge a debt (amount < 0: the level may go below 0)."""
        self.refill(now)
        self.level = min(self.capacity, self.level + amount)

    def ready_in(self, wanted: float) -> float:
        """Seconds until `wanted` (at most the bucket's size) is there."""
        return max(0.0, (min(wanted, self.capacity) - self.level) / self.rate)

    @property
    def piece(self) -> float:
        """The most one holder is granted at once."""
        return min(self.capacity, max(self.unit, self.rate * PIECE))


def lowest(*limits: float | None) -> float | None:
    """The smallest of the limits given (None and 0: no limit)."""
    given = [limit for limit in limits if limit]
    return min(given) if given else None


@dataclass
class _Limit:
    configured: float | None = None  # this gateway's share of the configured limit
    learnt: float | None = None  # its share of what the provider says
    factor: float = 1.0  # below 1 after 429s

    def per_minute(self) -> float | None:
        base = lowest(self.configured, self.learnt)
        return base * self.factor if base else None


@dataclass
class RateBudget:
    """One endpoint's four rate limits at one gateway (see the module docstring)."""

    now: float
    burst: float = 1.0
    limits: list[_Limit] = field(default_factory=lambda: [_Limit() for _ in KINDS])
    buckets: list[Bucket | None] = field(default_factory=lambda: [None] * len(KINDS))
    turn: int = 0  # who is served first among equals, rotating

    def held(self) -> tuple[bool, bool, bool, bool]:
        """Which kinds are held (a holder spends from its hand only for those)."""
        b = self.buckets
        return (b[0] is not None, b[1] is not None, b[2] is not None, b[3] is not None)

    def per_minute(self) -> Limits:
        """The rates held now (this gateway's share, after learning and 429s)."""
        b = self.buckets
        return tuple(None if x is None else x.per_minute for x in b)  # type: ignore[return-value]

    # -- what the limits are ----------------------------------------------------------

    def configure(self, configured: Limits, burst: float, now: float) -> None:
        """The limits declared on the models (this gateway's share), and their burst."""
        self.burst = burst
        for limit, value in zip(self.limits, configured, strict=True):
            limit.configured = value or None
        self._resize(now)

    def learn(self, observed: Limits, now: float) -> None:
        """What the provider says its limits are (this gateway's share): with a
        configured limit, only a lower one counts."""
        for limit, value in zip(self.limits, observed, strict=True):
            if value:
                limit.learnt = value
        self._resize(now)

    def throttled(self, now: float) -> None:
        """A 429: every held rate goes down, and what the buckets hold with it."""
        for limit in self.limits:
            limit.factor = max(FLOOR, limit.factor * DECREASE)
        self._resize(now)
        for bucket in self.buckets:
            if bucket is not None:
                bucket.level = min(bucket.level, 0.0)  # the provider says: none left now

    def succeeded(self, count: int, now: float) -> None:
        if count and any(limit.factor < 1.0 for limit in self.limits):
            for limit in self.limits:
                limit.factor = min(1.0, limit.factor + INCREASE * count)
            self._resize(now)

    def _resize(self, now: float) -> None:
        for i, limit in enumerate(self.limits):
            rate, bucket = limit.per_minute(), self.buckets[i]
            if rate is None:
                self.buckets[i] = None
            elif bucket is None:
                self.buckets[i] = Bucket(rate, self.burst, now)
            else:
                bucket.resize(rate, self.burst, now)

    # -- holders' budget --------------------------------------------------------------

    def settle(self, amounts: Rates, now: float) -> None:
        """Budget back (unspent, or an estimate above the real usage: amount > 0), or a
        debt (usage beyond the estimate: amount < 0), per kind."""
        for bucket, amount in zip(self.buckets, amounts, strict=True):
            if bucket is not None and amount:
                bucket.put(amount, now)

    def grant(self, wants: dict[str, Rates], now: float) -> dict[str, Rates]:
        """Pieces of what the buckets hold, fairly shared among the holders that want
        some (each at most a piece, whole requests only)."""
        given: dict[str, list[float]] = {h: [0.0] * len(KINDS) for h in wants}
        order = sorted(wants)
        if order:
            self.turn = (self.turn + 1) % len(order)
            order = order[self.turn :] + order[: self.turn]
        for k, bucket in enumerate(self.buckets):
            if bucket is None:
                continue
            asking = {h: min(w[k], bucket.piece) for h, w in wants.items() if w[k] > 0}
            if not asking:
                continue
            bucket.refill(now)
            if k == 0:
                self._deal_whole(bucket, asking, order, given)
            else:
                self._share(bucket, asking, given, k, now)
        return {h: (g[0], g[1], g[2], g[3]) for h, g in given.items() if any(g)}

    @staticmethod
    def _deal_whole(
        bucket: Bucket, asking: dict[str, float], order: list[str], given: dict[str, list[float]]
    ) -> None:
        """Requests, one at a time round the holders (a third of a request sends nothing)."""
        left = math.floor(bucket.level)
        wanting = [h for h in order if h in asking]
        while left > 0 and wanting:
            for holder in list(wanting):
                if left <= 0:
                    break
                given[holder][0] += 1
                bucket.level -= 1
                left -= 1
                if given[holder][0] >= asking[holder]:
                    wanting.remove(holder)

    @staticmethod
    def _share(
        bucket: Bucket, asking: dict[str, float], given: dict[str, list[float]], k: int, now: float
    ) -> None:
        """Tokens: equal shares of what is there, none above its ask (water-filling)."""
        ordered = sorted(asking.items(), key=lambda kv: kv[1])
        for i, (holder, ask) in enumerate(ordered):
            fair = max(0.0, bucket.level) / (len(ordered) - i)
            given[holder][k] += bucket.take(min(ask, fair), now)

    def ready_in(self, wants: list[Rates]) -> float | None:
        """Seconds until some waiting holder can be given a piece (None: none waits)."""
        waits = []
        for k, bucket in enumerate(self.buckets):
            if bucket is None:
                continue
            asks = [w[k] for w in wants if w[k] > 0]
            if asks:
                waits.append(bucket.ready_in(min(min(asks), bucket.piece)))
        return min(waits) if waits else None

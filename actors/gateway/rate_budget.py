"""An endpoint's rate limits as its gateway keeps them: smooth buckets, leased in pieces.

Plain Python (no Ray, no asyncio, the clock passed in): `EndpointLedger` keeps one
`RateBudget` per endpoint and tests drive it directly.

Four limits, as providers count them: requests, tokens, input tokens and output tokens
per minute (`KINDS`). Each held limit is a bucket that refills continuously at this
gateway's share of the rate and holds `HEADROOM` of `burst` seconds of it, so no more
than that plus the rate goes out in any stretch of time (providers enforce a minute's
limit over much shorter periods, in buckets of about a second). A quarter of the
provider's burst, not all of it: a bucket that let the provider's own run empty would
meet every send delayed on its way (a grant or a request slowed by a loaded machine)
with a 429; a quarter leaves three quarters of a second of slack, and costs nothing of
the rate. Holders are granted rate budget in pieces of
at most `PIECE` seconds' worth, shared fairly between those who wait, so no process
hoards a minute: what a process holds and has not spent came out of the bucket, and
comes back when it releases its lease, or is lost for at most a piece when it dies.

Requests are not handed out as a count to spend at once but *scheduled*: the requests
kind is a `RateWindow` (the core's pacer over sliding windows of `burst` seconds), and
each request granted carries the time it may be sent, no sooner (`due`: the window's
next free slot, booked as it is granted; at most `HORIZON` seconds ahead). So however
many holders share the rate, and whenever their grants reach them, the sends of all of
them together are spaced at the window's pace, and no window of `burst` seconds carries
more than its share (a holder drops a request it could not send within `LATE` of its
time: sent later, it would crowd a window planned without it).

A limit is the configured one (the model's `rate_limit`), lowered by what is learnt:
a `RateLearner` (the core's AIMD) reads the readings holders report from the replies'
headers (a configured limit is the ceiling; with none, the provider's limits), and the
429s (each held rate goes down by its `DECREASE`, each answered request brings back a
step). The learner counts the provider's whole limits; this gateway holds its `share`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from raygent.backend import PROBE_WINDOW, Bucket, RateLearner, RateLimit, RateReading, RateWindow

__all__ = [
    "HORIZON",
    "KINDS",
    "LATE",
    "NO_LIMITS",
    "NO_RATES",
    "PIECE",
    "Limits",
    "RateBudget",
    "Rates",
]

KINDS = ("requests", "tokens", "input_tokens", "output_tokens")
Rates = tuple[float, float, float, float]  # one amount of each kind, in KINDS' order
Limits = tuple[float | None, float | None, float | None, float | None]  # per minute
NO_RATES: Rates = (0.0, 0.0, 0.0, 0.0)
NO_LIMITS: Limits = (None, None, None, None)

PIECE = 0.25  # seconds of a rate granted to one holder at once, at most
HEADROOM = 0.25  # of the burst the provider allows, what the gateway's buckets hold
HORIZON = 0.25  # seconds ahead a request may be scheduled when it is granted
LATE = 0.1  # seconds past its time a scheduled request may still be sent


def _burst(per_minute: float, burst: float) -> float:
    """The seconds a bucket holds: `HEADROOM` of the burst, one request at least."""
    return max(burst * HEADROOM, 60.0 / per_minute)


def _piece(bucket: Bucket | RateWindow) -> float:
    """The most one holder is granted at once."""
    return min(bucket.capacity, max(1.0, bucket.rate * PIECE))


def lowest(*limits: float | None) -> float | None:
    """The smallest of the limits given (None and 0: no limit)."""
    given = [limit for limit in limits if limit]
    return min(given) if given else None


@dataclass
class RateBudget:
    """One endpoint's four rate limits at one gateway (see the module docstring)."""

    now: float
    burst: float = 1.0
    share: float = 1.0  # this gateway's share of the provider's limits
    configured: Limits = NO_LIMITS  # this gateway's share of the configured limits
    learner: RateLearner | None = None  # over the whole limits (None: not learning)
    buckets: list[Bucket | RateWindow | None] = field(default_factory=lambda: [None] * len(KINDS))
    turn: int = 0  # who is served first among equals, rotating
    due: dict[str, list[float]] = field(default_factory=dict)  # the last grant's times

    def held(self) -> tuple[bool, bool, bool, bool]:
        """Which kinds are held (a holder spends from its hand only for those)."""
        b = self.buckets
        return (b[0] is not None, b[1] is not None, b[2] is not None, b[3] is not None)

    def per_minute(self) -> Limits:
        """The rates held now (this gateway's share, after learning and 429s)."""
        return tuple(None if b is None else b.rate * 60 for b in self.buckets)  # type: ignore[return-value]

    # -- what the limits are ----------------------------------------------------------

    def configure(
        self, configured: Limits, burst: float, share: float, learn: bool, now: float
    ) -> None:
        """The limits declared on the models (this gateway's share), their burst, and
        whether to learn from the replies."""
        self.burst, self.share = burst, share
        if configured != self.configured or (self.learner is None) == learn:
            self.configured = configured
            whole = [None if x is None else x / share for x in configured]
            ceiling = RateLimit(
                requests_per_minute=whole[0],
                tokens_per_minute=whole[1],
                input_tokens_per_minute=whole[2],
                output_tokens_per_minute=whole[3],
            )
            self.learner = RateLearner(ceiling if ceiling.binds else None, now) if learn else None
        self._resize(now)

    def learn(self, reading: RateReading, now: float, unpaced: float = 0.0) -> None:
        """What a reply's headers said of the provider's limits (`unpaced`: requests
        sent lately with no rate held, which a window learnt now counts)."""
        if self.learner is not None:
            self.learner.read(reading)
            self._resize(now, unpaced)

    def throttled(
        self, reading: RateReading | None, in_flight: int, now: float, pause: float = 0.0
    ) -> None:
        """A 429: the held rates go down, and what the buckets hold with them; nothing
        is scheduled within the `pause` every holder keeps."""
        # A rate only when one is known (configured, or stated by headers): the learner
        # would take the rate this gateway saw answered as one, and in a storm of 429s
        # from an endpoint that states none, that is nothing (the pause and the
        # concurrency's own decrease handle those).
        stated = reading is not None and reading.limit() is not None
        if self.learner is not None and (any(self.held()) or stated):
            # A window of a known limit crowded: the holders paused for its slack only.
            retry = reading.retry_after if reading is not None else None
            known = stated or any(self.configured)
            crowded = known and retry is not None and retry <= self.burst
            self.learner.throttled(reading, in_flight, now, crowded=crowded)
            self._resize(now)
        for bucket in self.buckets:
            if isinstance(bucket, RateWindow):
                bucket.empty(now + pause)
            elif bucket is not None:
                bucket.empty(now)  # the provider says: none left now

    def succeeded(self, count: int, in_flight: int, now: float) -> None:
        """`count` requests answered: each a step of the rates back up."""
        learner = self.learner
        if learner is None or not count:
            return
        learner.meter.add(now, count)
        if learner.knows:
            for _ in range(count):
                learner.succeeded(None, in_flight, now)
            self._resize(now)

    def _resize(self, now: float, unpaced: float = 0.0) -> None:
        learnt = self.learner.rates if self.learner is not None else [None] * len(KINDS)
        for i, (configured, whole) in enumerate(zip(self.configured, learnt, strict=True)):
            per_minute = lowest(configured, None if whole is None else whole * self.share)
            bucket = self.buckets[i]
            seconds = self.burst if i == 0 else _burst(per_minute or 1.0, self.burst)
            if per_minute is None:
                self.buckets[i] = None
            elif bucket is None and i == 0:
                window = self.buckets[i] = RateWindow(per_minute / 60, seconds, now)
                if configured is None:
                    # Learnt from a reply: the slow start's requests went unpaced.
                    window.spent(max(float(PROBE_WINDOW), unpaced), now)
            elif bucket is None:
                self.buckets[i] = Bucket(per_minute / 60, seconds, now)
            elif not math.isclose(bucket.rate, per_minute / 60) or (
                isinstance(bucket, RateWindow) and bucket.seconds != seconds
            ):
                bucket.set_rate(per_minute / 60, seconds, now)

    # -- holders' budget --------------------------------------------------------------

    def settle(self, amounts: Rates, now: float) -> None:
        """Budget back (unspent, or an estimate above the real usage: amount > 0), or a
        debt (usage beyond the estimate: amount < 0), per kind."""
        for bucket, amount in zip(self.buckets, amounts, strict=True):
            # Scheduled requests never come back: their times are past, or kept for them.
            if bucket is not None and amount and not isinstance(bucket, RateWindow):
                bucket.settle(amount, 0.0, now)

    def grant(
        self, wants: dict[str, Rates], pending: dict[str, Rates], now: float
    ) -> dict[str, Rates]:
        """Pieces of what the buckets hold, fairly shared among the holders that want
        some (whole requests only, each with its time: `due`). A holder is never owed
        more than a piece: what it was granted and has not yet been sent (`pending`, it
        is not asking now: a slow or stalled process) counts, so budget never piles up
        for one to send at once."""
        given: dict[str, list[float]] = {h: [0.0] * len(KINDS) for h in wants}
        self.due = {}
        order = sorted(wants)
        if order:
            self.turn = (self.turn + 1) % len(order)
            order = order[self.turn :] + order[: self.turn]
        for k, bucket in enumerate(self.buckets):
            if bucket is None:
                continue
            piece = _piece(bucket)
            asking = {h: min(w[k], piece - pending[h][k]) for h, w in wants.items()}
            asking = {h: ask for h, ask in asking.items() if ask > 0}
            if not asking:
                continue
            if isinstance(bucket, RateWindow):
                self._deal_scheduled(bucket, asking, order, given, now)
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

    def _deal_scheduled(
        self,
        window: RateWindow,
        asking: dict[str, float],
        order: list[str],
        given: dict[str, list[float]],
        now: float,
    ) -> None:
        """Requests, one at a time round the holders, each booked at the window's next
        free time, while that is within `HORIZON`."""
        wanting = [h for h in order if h in asking]
        while wanting:
            for holder in list(wanting):
                if window.next_time(1.0, now) > now + HORIZON:
                    return
                self.due.setdefault(holder, []).append(window.schedule(1.0, now))
                given[holder][0] += 1
                if given[holder][0] >= asking[holder]:
                    wanting.remove(holder)

    @staticmethod
    def _share(
        bucket: Bucket, asking: dict[str, float], given: dict[str, list[float]], k: int, now: float
    ) -> None:
        """Tokens: equal shares of what is there, none above its ask (water-filling)."""
        ordered = sorted(asking.items(), key=lambda kv: kv[1])
        for i, (holder, ask) in enumerate(ordered):
            amount = min(ask, max(0.0, bucket.level) / (len(ordered) - i))
            bucket.take(amount, now)
            given[holder][k] += amount

    def ready_in(self, wants: list[tuple[Rates, Rates]], now: float) -> float | None:
        """Seconds until some waiting holder can be given a piece (None: none waits, or
        each is owed a piece already). `wants`: each holder's (wanted, pending)."""
        waits = []
        for k, bucket in enumerate(self.buckets):
            if bucket is None:
                continue
            piece = _piece(bucket)
            asks = [min(w[k], piece - p[k]) for w, p in wants if w[k] > 0]
            asks = [math.ceil(ask) if k == 0 else ask for ask in asks if ask > 0]
            if asks and isinstance(bucket, RateWindow):
                waits.append(max(0.0, bucket.next_time(1.0, now) - HORIZON - now))
            elif asks:
                waits.append(bucket.ready_in(min(asks), now))
        return min(waits) if waits else None

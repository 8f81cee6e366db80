"""One key's rate as one process holds it: the configured limit and what is learnt, as
a `RateWindow` per dimension (requests, tokens, input tokens, output tokens): sends
spaced at `FILL` of the limit, no window of the limit's `burst` seconds carrying more
than its share (`raygent.rates.window`).

A request's `need` is `need_of(input, output)`: one request, and its estimated tokens
(`raygent.rates.estimate`). The holder asks `ready_in(need)`, waits that long, `take`s it
just before sending, and after the reply `settle`s it at the real use (`used`; None: an
error reply, which used nothing) and reports what the reply said (`replied` or
`throttled`, a 429). Pure arithmetic over injected time; the holder does the waiting.

`idle` is true while there is nothing to hold: no limit configured, nothing learnt, no
pause; the holder then skips the pacer entirely (the hot path stays as it was).
`probing`: learning, with nothing configured or known yet: the first requests go alone,
and what its reply says paces those after it.
"""

from __future__ import annotations

import math

from .learner import RateLearner
from .limits import RateLimit, RateReading
from .window import RateWindow, crowded_pause

__all__ = ["DEFAULT_PAUSE", "MAX_PAUSE", "Need", "RatePacer", "need_of"]

Need = tuple[float, float, float, float]
# A 429 that says no retry-after pauses the key this long (a second's share refills).
DEFAULT_PAUSE = 1.0
# A retry-after longer than this (a quota, not a rate) pauses nobody: the 429 goes back
# to its caller, whose retry waits for it (as the Ray gateway does past its `max_wait`).
MAX_PAUSE = 60.0


def need_of(input_tokens: float, output_tokens: float) -> Need:
    """What a request counts: one request, and its tokens (all, input, output)."""
    return (1.0, input_tokens + output_tokens, input_tokens, output_tokens)


class RatePacer:
    """One key's buckets, under its configured limit and what is learnt."""

    def __init__(self, limit: RateLimit | None, now: float, *, learn: bool | None = None) -> None:
        if learn is None:
            learn = limit.learn if limit is not None else True
        self.configured = limit if limit is not None and limit.binds else None
        self.burst = limit.burst if limit is not None else 1.0
        self.learner = RateLearner(self.configured, now) if learn else None
        self.buckets: list[RateWindow | None] = [None, None, None, None]
        self.paused_until = -math.inf
        self.probing = learn and self.configured is None
        self.in_flight = 0
        self.idle = True
        self.throttles = 0  # the 429s this key met
        self._apply(now)

    def __repr__(self) -> str:
        return f"RatePacer(limit={self.limit!r}, in_flight={self.in_flight})"

    @property
    def limit(self) -> RateLimit | None:
        """The limit held now: the configured one, lowered by what is learnt."""
        learnt = self.learner.limit(self.burst) if self.learner is not None else None
        if self.configured is None:
            return learnt
        return self.configured.tightest(learnt)

    def concurrency(self, bound: int) -> int:
        """The concurrency to hold, under the model's `bound`: what is learnt, if less."""
        learnt = self.learner.concurrency if self.learner is not None else None
        return bound if learnt is None else max(1, min(bound, int(learnt)))

    def ready_in(self, need: Need, now: float) -> float:
        """Seconds until `need` may go (0: now)."""
        wait = self.paused_until - now
        for bucket, amount in zip(self.buckets, need, strict=True):
            if bucket is not None and amount > 0:
                wait = max(wait, bucket.ready_in(amount, now))
        return max(wait, 0.0)

    def take(self, need: Need, now: float) -> None:
        """`need` goes now (into debt if it must)."""
        for bucket, amount in zip(self.buckets, need, strict=True):
            if bucket is not None and amount > 0:
                bucket.take(amount, now)
        self.in_flight += 1
        if self.learner is not None:
            self.learner.sent(now)

    def settle(self, need: Need, used: Need | None, now: float) -> None:
        """A request taken with `need` used `used` (None: nothing, an error reply)."""
        self.in_flight = max(0, self.in_flight - 1)
        spent = used if used is not None else (0.0, 0.0, 0.0, 0.0)
        for bucket, reserved, real in zip(self.buckets, need, spent, strict=True):
            if bucket is not None:
                bucket.settle(reserved, real, now)

    def replied(self, reading: RateReading | None, latency: float | None, now: float) -> None:
        """A reply came (not a 429): learn from its headers and latency."""
        self.probing = False
        learner = self.learner
        if learner is None:
            self._set_idle(now)
            return
        if reading is not None:
            learner.read(reading)
        if learner.knows:
            learner.succeeded(latency, self.in_flight, now)
        self._apply(now)

    def throttled(self, reading: RateReading | None, now: float) -> None:
        """A 429: pause for its retry-after (for a window's slack when the limit is
        known and paced: `crowded_pause`), empty the windows, learn lower rates."""
        self.probing = False
        self.throttles += 1
        retry = reading.retry_after if reading is not None else None
        pause = DEFAULT_PAUSE if retry is None else retry
        crowded = self._known() and pause <= self.burst  # a window's, not a quota's
        if crowded:
            pause = crowded_pause(pause, self.burst)
        if pause <= MAX_PAUSE:
            self.paused_until = max(self.paused_until, now + pause)
        if self.learner is not None:
            self.learner.throttled(reading, self.in_flight, now, crowded=crowded)
        self._apply(now)
        for bucket in self.buckets:
            if bucket is not None:
                bucket.empty(now)

    def _apply(self, now: float) -> None:
        learner = self.learner
        if learner is not None:
            if not learner.changed and any(b is not None for b in self.buckets):
                self._set_idle(now)
                return
            learner.changed = False
        limit = self.limit
        rates = limit.per_minute if limit is not None else (None, None, None, None)
        for i, per_minute in enumerate(rates):
            bucket = self.buckets[i]
            if per_minute is None:
                self.buckets[i] = None
            elif bucket is None:
                bucket = self.buckets[i] = RateWindow(per_minute / 60, self.burst, now)
                if i == 0 and learner is not None and not self._configures(i):
                    # Learnt after requests went unpaced (the probes): they count (the
                    # meter's count decays over seconds: at least the last window's).
                    bucket.spent(learner.meter.count, now)
            elif not math.isclose(bucket.rate, per_minute / 60):
                bucket.set_rate(per_minute / 60, self.burst, now)
        self._set_idle(now)

    def _known(self) -> bool:
        """Whether a held window paces under a known limit (configured, or stated by
        the headers), not one guessed from what was sent."""
        learner = self.learner
        return any(
            window is not None
            and (self._configures(i) or (learner is not None and learner.ceiling[i] is not None))
            for i, window in enumerate(self.buckets)
        )

    def _configures(self, i: int) -> bool:
        return self.configured is not None and self.configured.per_minute[i] is not None

    def _set_idle(self, now: float) -> None:
        learnt = self.learner is not None and self.learner.concurrency is not None
        self.idle = (
            not self.probing
            and not learnt
            and self.paused_until <= now
            and all(b is None for b in self.buckets)
        )

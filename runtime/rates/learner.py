"""Learning a key's rate and concurrency from its replies (additive increase,
multiplicative decrease), when nothing is configured or below what is.

- the headers' limits (`RateReading.limit()`) become the ceiling of what is learnt (a
  configured `RateLimit` stays the ceiling above that), held as a configured one is (the
  pacer's window sends under either, `raygent.rates.window.FILL`);
- a 429 cuts each limited dimension's rate by `DECREASE` (a dimension with no rate yet
  starts at the rate measured being sent), and the concurrency too; its `retry-after`
  pauses the key;
- each success adds back a step of the rate (`INCREASE` of the ceiling, or of the rate
  at the last cut when there is none, and a tenth of that past it);
- a latency that rises to `LATENCY_RISE` times the lowest seen cuts the concurrency;
  a success at a steady latency adds one slot per window of replies.

Pure arithmetic over injected time (seconds, any monotonic origin).
"""

from __future__ import annotations

import math

from .limits import RateLimit, RateReading

__all__ = ["CROWDED", "DECREASE", "INCREASE", "MARGIN", "RateLearner", "SendMeter"]

DECREASE = 0.7  # a 429 keeps this share of the rate
CROWDED = 0.9  # a 429 that says a window of a known limit was crowded keeps this share
INCREASE = 0.01  # of the ceiling, per success
MARGIN = 0.95  # of the rate at the last cut, past which a rate with no ceiling grows slower
LATENCY_RISE = 2.0
_MIN_PER_MINUTE = 1.0
# With no limit known, a 429 (Gemini's RESOURCE_EXHAUSTED, Bedrock's ThrottlingException)
# within this many seconds of the last cut answers a send of the same spent window: no
# second cut (the round's 429s are one signal).
ROUND = 1.0
_EWMA = 0.2
_TAU = 2.0  # seconds over which the send meter averages


class SendMeter:
    """Requests sent per second, averaged over the last few seconds (an exponentially
    decaying count)."""

    __slots__ = ("count", "stamp", "start")

    def __init__(self, now: float) -> None:
        self.count = 0.0
        self.stamp = self.start = now

    def add(self, now: float, amount: float = 1.0) -> None:
        self._decay(now)
        self.count += amount

    def per_second(self, now: float) -> float:
        self._decay(now)
        # The decaying count of a steady rate r is r * TAU * (1 - exp(-elapsed / TAU)).
        elapsed = max(now - self.start, 1e-3)
        return self.count / (_TAU * -math.expm1(-elapsed / _TAU))

    def _decay(self, now: float) -> None:
        if now > self.stamp:
            self.count *= math.exp(-(now - self.stamp) / _TAU)
            self.stamp = now


class RateLearner:
    """A key's learnt rates (per minute, per dimension: requests, tokens, input, output;
    None: not limited) and concurrency (None: not limited)."""

    def __init__(self, ceiling: RateLimit | None, now: float) -> None:
        self.configured = ceiling
        self.ceiling: list[float | None] = list(ceiling.per_minute) if ceiling else [None] * 4
        self.rates: list[float | None] = [None] * 4
        self._cut_at: list[float | None] = [None] * 4
        self.concurrency: float | None = None
        self.lowest_latency: float | None = None
        self.latency: float | None = None
        self._latency_cut = -math.inf
        self._unstated_cut = -math.inf  # when a 429 stating no limits last cut
        self.meter = SendMeter(now)
        self.changed = False  # a rate moved since the holder last looked

    @property
    def knows(self) -> bool:
        """Whether anything is learnt (a rate or a concurrency)."""
        return self.concurrency is not None or any(r is not None for r in self.rates)

    def limit(self, burst: float) -> RateLimit | None:
        """What is learnt, as a limit (each rate is kept under its ceiling)."""
        rates = self.rates
        if all(r is None for r in rates):
            return None
        return RateLimit(
            requests_per_minute=rates[0],
            tokens_per_minute=rates[1],
            input_tokens_per_minute=rates[2],
            output_tokens_per_minute=rates[3],
            burst=burst,
        )

    def _configured(self, i: int) -> float | None:
        return self.configured.per_minute[i] if self.configured else None

    def read(self, reading: RateReading) -> None:
        """A reply's headers: their limits are the ceiling (under the configured one)."""
        stated = reading.limit()
        if stated is None:
            return
        for i, value in enumerate(stated.per_minute):
            if value is None:
                continue
            configured = self._configured(i)
            ceiling = value if configured is None else min(configured, value)
            rate = self.rates[i]
            if ceiling != self.ceiling[i] or rate is None:
                self.ceiling[i] = ceiling
                self.rates[i] = ceiling if rate is None else min(rate, ceiling)
                self.changed = True

    def sent(self, now: float) -> None:
        self.meter.add(now)

    def throttled(
        self, reading: RateReading | None, in_flight: int, now: float, *, crowded: bool = False
    ) -> None:
        """A 429: cut the rates the reply says are spent (all known ones when it does
        not say), and the concurrency. `crowded`: a window of a known limit was crowded
        (`raygent.rates.window.crowded_pause`): the rates are cut by `CROWDED` only, the
        concurrency not at all (the pace, not the requests in flight, crowded it)."""
        if reading is not None:
            self.read(reading)
        if all(c is None for c in self.ceiling):
            # No limit known (none configured, no rate headers: Gemini's, Bedrock's):
            # the 429s of one burst, sent before the first of them was heard, each cut
            # again would compound (a burst of 13 took 2,800 a minute to 27 and the
            # concurrency to 1; 40 requests then took a minute against a limit of 600).
            # One cut per `ROUND`: the pause and the cut are in force for what follows.
            if now - self._unstated_cut < ROUND:
                return
            self._unstated_cut = now
        spent = _spent(reading)
        for i in range(4):
            if spent and i not in spent:
                continue
            rate = self.rates[i] if self.rates[i] is not None else self.ceiling[i]
            if rate is None and i == 0:
                rate = self.meter.per_second(now) * 60  # what was being sent, taken as the rate
            if rate is None:
                continue
            self._cut_at[i] = rate
            self.rates[i] = max(_MIN_PER_MINUTE, rate * (CROWDED if crowded else DECREASE))
            self.changed = True
        if crowded:
            return
        base = self.concurrency if self.concurrency is not None else max(in_flight, 1)
        self.concurrency = max(1.0, base * DECREASE)

    def succeeded(self, latency: float | None, in_flight: int, now: float) -> None:
        """A reply: step each rate back up, and the concurrency unless latency rises."""
        for i, rate in enumerate(self.rates):
            if rate is None:
                continue
            top = self.ceiling[i]
            if top is not None:
                cap, step = top, top * INCREASE
            else:
                cut = self._cut_at[i] or rate
                cap, step = math.inf, cut * INCREASE * (0.1 if rate >= cut * MARGIN else 1.0)
            new = min(cap, rate + step)
            if new != rate:
                self.rates[i] = new
                self.changed = True
        if latency is not None:
            self._latency(latency, in_flight, now)

    def _latency(self, latency: float, in_flight: int, now: float) -> None:
        ewma = latency if self.latency is None else self.latency + _EWMA * (latency - self.latency)
        self.latency = ewma
        low = self.lowest_latency
        self.lowest_latency = latency if low is None else min(low, latency)
        if self.lowest_latency <= 0:
            return
        if ewma > LATENCY_RISE * self.lowest_latency and now - self._latency_cut > ewma:
            self._latency_cut = now
            base = self.concurrency if self.concurrency is not None else max(in_flight, 1)
            self.concurrency = max(1.0, base * DECREASE)
            # The new, lower, concurrency is judged from here on.
            self.latency = self.lowest_latency * LATENCY_RISE * 0.75
        elif self.concurrency is not None:
            self.concurrency += 1.0 / max(self.concurrency, 1.0)


def _spent(reading: RateReading | None) -> set[int]:
    """The dimensions a 429's headers say are spent (remaining 0)."""
    if reading is None:
        return set()
    return {
        i
        for i, window in enumerate(reading.windows)
        if window is not None and window.remaining is not None and window.remaining < 1
    }


def _lower(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)

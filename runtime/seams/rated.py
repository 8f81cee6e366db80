"""Rates held in this process: each model key's `RatePacer` (per event loop), the wait
for it, and what a trip met (`TripRates`).

A request to a key with a rate (configured, or learnt) waits, inside its endpoint's
concurrency bound, until its requests and estimated tokens fit the key's windows (FIFO:
one waiter at a time sleeps for the head's share), goes, and is settled at its real use
(an error reply gives back what it did not use); its reply's headers, a 429 and the
latency teach the learner. A key with nothing configured starts *probing*: its first
`PROBE_WINDOW` requests go, the others wait for a reply, and what it says paces them (a
reply with no rate headers leaves the key idle). An idle key costs a request one
attribute check and a look at the reply's `rate`.

The local backend's admissions (`seams.local`) hold these; what a request waited and
the 429s it met go on the request's record (`RequestRecord`), kept by the access layer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import Hashable, Sequence

from ..abort import AbortSignal, abortable
from ..errors import RateLimitError
from ..messages import Message
from ..models.contract import Limits, Model, ModelOptions, ModelResponse
from ..rates import Need, RatePacer, RateReading, estimate, need_of

__all__ = ["HeldBack", "HeldRate", "LocalRates", "reading_of_error", "wait_held_back"]


# Requests of a key with nothing configured or known that go before its first reply (a
# slow start: a job's first wave does not meet a provider's burst all at once).
PROBE_WINDOW = 4


def reading_of_error(error: RateLimitError) -> RateReading | None:
    """What a 429 said: its headers' reading, else its retry-after alone."""
    found = error.details.get("rate")
    if isinstance(found, dict):
        try:
            return RateReading.model_validate(found)
        except ValueError:
            pass
    retry = error.details.get("retry_after")
    return RateReading(retry_after=float(retry)) if isinstance(retry, (int, float)) else None


def used_of(model: Model, response: ModelResponse, need: Need) -> Need:
    """What a reply used, as the provider counts it against a rate: tokens per minute
    keep the output cap counted at admission (OpenAI does not give back the unused
    part of `max_tokens`), input at the real prompt (Anthropic does not count cache
    reads), output at the real output (Anthropic gives back what was not used)."""
    usage = response.usage
    spent_in = usage.total_input_tokens
    if model.provider == "anthropic":
        spent_in -= usage.cached_tokens
    spent_out = float(usage.output_tokens)
    return (1.0, spent_in + max(need[3], spent_out), float(spent_in), spent_out)


class HeldBack:
    """Requests a 429 told to wait longer than their key pauses (a crowded window's
    429 pauses the key for the window's slack; the request itself keeps its
    retry-after): each one's time, until its next admission asks (by identity: the
    access layer sends the same request again)."""

    __slots__ = ("_until",)

    def __init__(self) -> None:
        self._until: dict[int, tuple[object, float]] = {}

    def hold(self, request: object, until: float, now: float) -> None:
        gone = [k for k, (_, t) in self._until.items() if t < now - 60.0]  # never asked
        for key in gone:
            del self._until[key]
        self._until[id(request)] = (request, until)

    def until(self, request: object) -> float | None:
        """When `request` may be sent again (None: it was not held back)."""
        found = self._until.pop(id(request), None) if self._until else None
        return found[1] if found is not None and found[0] is request else None


async def wait_held_back(held: HeldBack, request: object, signal: AbortSignal | None) -> float:
    """Wait until `request` may be sent again, if a 429 held it back; the seconds."""
    until = held.until(request)
    if until is None:
        return 0.0
    left = until - time.monotonic()
    if left > 0:
        await abortable(asyncio.sleep(left), signal)
    return max(left, 0.0)


class HeldRate:
    """One key's pacer in one event loop, and the waiting for it."""

    __slots__ = ("_lock", "_probe", "_probes", "_settled", "held_back", "pacer")

    def __init__(self, pacer: RatePacer) -> None:
        self.pacer = pacer
        self._lock = asyncio.Lock()
        # Set when a request settles: what it did not use may let the waiter go sooner.
        self._settled: asyncio.Event | None = None
        self._probe: asyncio.Future[None] | None = None
        self._probes = 0
        self.held_back = HeldBack()

    async def probe_turn(self, signal: AbortSignal | None) -> bool:
        """While probing: go if fewer than `PROBE_WINDOW` probes are in flight, else
        wait for one to end; True if this request is a probe (it must call `probed()`
        when it ends)."""
        while self.pacer.probing:
            if self._probes < PROBE_WINDOW:
                self._probes += 1
                return True
            if self._probe is None:
                self._probe = asyncio.get_running_loop().create_future()
            await abortable(asyncio.shield(self._probe), signal)
        return False

    def probed(self) -> None:
        self._probes -= 1
        probe, self._probe = self._probe, None
        if probe is not None and not probe.done():
            probe.set_result(None)

    def need(self, model: Model, messages: Sequence[Message], options: ModelOptions) -> Need:
        """A request's need: its tokens estimated only when a token window is held."""
        buckets = self.pacer.buckets
        if buckets[1] is None and buckets[2] is None and buckets[3] is None:
            return need_of(0.0, 0.0)
        return need_of(*map(float, estimate(messages, options, model)))

    async def wait(self, need: Need, signal: AbortSignal | None) -> float:
        """Wait until `need` fits, take it; the seconds waited."""
        pacer = self.pacer
        now = time.monotonic()
        if not self._lock.locked() and pacer.ready_in(need, now) <= 0:
            pacer.take(need, now)
            return 0.0
        start = now
        async with self._lock:
            while True:
                now = time.monotonic()
                ready = pacer.ready_in(need, now)
                if ready <= 0:
                    pacer.take(need, now)
                    return now - start
                # Until its time, or until a request in flight settles below its
                # estimate (an unused `max_tokens` given back), whichever comes first.
                settled = self._settled
                if settled is None:
                    settled = self._settled = asyncio.Event()
                with contextlib.suppress(TimeoutError):
                    await abortable(asyncio.wait_for(settled.wait(), ready), signal)

    def settle(self, need: Need, used: Need | None, now: float) -> None:
        """A request taken with `need` used `used` (None: nothing): settle it, and wake
        the waiter, whom what came back may let go now."""
        self.pacer.settle(need, used, now)
        self._wake()

    def answered(self, model: Model, response: ModelResponse, need: Need, sent: float) -> None:
        """A paced request (taken with `need`, sent at `sent`) was answered: settle it at
        its real use, and learn from the reply and its latency."""
        now = time.monotonic()
        pacer = self.pacer
        pacer.settle(need, used_of(model, response, need), now)
        pacer.replied(response.rate, now - sent, now)
        self._wake()

    def _wake(self) -> None:
        settled, self._settled = self._settled, None
        if settled is not None:
            settled.set()

    def went(self) -> None:
        """An unpaced request went (the learner's meter of what is sent)."""
        learner = self.pacer.learner
        if learner is not None:
            learner.sent(time.monotonic())

    def learn(self, response: ModelResponse) -> None:
        """An unpaced request's reply said something of rates."""
        self.pacer.replied(response.rate, None, time.monotonic())

    def throttled(self, error: RateLimitError, in_flight: int, request: object = None) -> None:
        """A 429: pause, cut the rates and the concurrency (`in_flight`: what was); a
        `request` the key pauses less for than its retry-after waits that out itself. A
        tier's refusal for capacity (flex) says nothing of the key's rate: nobody pauses."""
        if error.for_capacity:
            return
        pacer = self.pacer
        counted, pacer.in_flight = pacer.in_flight, max(pacer.in_flight, in_flight)
        reading, now = reading_of_error(error), time.monotonic()
        pacer.throttled(reading, now)
        pacer.in_flight = counted
        retry = reading.retry_after if reading is not None else None
        if request is not None and retry is not None and pacer.paused_until < now + retry:
            self.held_back.hold(request, now + retry, now)


class LocalRates:
    """Each key's `HeldRate`, per event loop (a key is the model's `rate_key` and its
    `rate_limit`: a model rebuilt with a new limit is held to it at once)."""

    def __init__(self) -> None:
        self._held: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[tuple[Hashable, object], HeldRate]
        ] = weakref.WeakKeyDictionary()

    def held(self, limits: Limits) -> HeldRate:
        """The held rate of a model with these `limits`."""
        loop = asyncio.get_running_loop()
        per_loop = self._held.get(loop)
        if per_loop is None:
            per_loop = self._held[loop] = {}
        key = (limits.rate_key, limits.rate_limit)
        held = per_loop.get(key)
        if held is None:
            held = per_loop[key] = HeldRate(RatePacer(limits.rate_limit, time.monotonic()))
        return held

"""The access layer under a run's request path: admission, the send, usage recording and
429 handling, written once for `complete` and `stream` alike and for every backend.

    request ─▶ tier ─▶ admit (bound, rate, pause) ─▶ send ─┬─ reply: settle, record
                 ▲                                          ├─ 429: throttle ─▶ wait ─┐
                 │                                          │   (fail fast: raise)     │
                 └── capacity refused: the fallback tier ◀──┴──────────────────────────┘

A backend differs only in where its counters live, behind `Admissions`: in this process
(`seams.local`: each endpoint's `EndpointBound` and each key's held rate) or leased from
a gateway shared across processes (Ray's `EndpointLease` and rate lease). An admission
is settled as answered (at the reply's use), throttled (a 429: the counters pause and
learn) or failed (an error reply, which used nothing), and given back once done,
however the send ended.

- **tier**: a request whose tier is a `Tier` with a fallback (`Tier("flex",
  fallback="default")`) is sent at its tier alone (the adapter sees a plain tier and
  never resends itself); refused for capacity (`RateLimitError.for_capacity`), it is
  sent again at once at the fallback tier. Nobody pauses for such a refusal.
- **429**: every holder of the endpoint pauses for its Retry-After (the counters'
  business: the next admission waits it out), and the request is sent again after
  it, or after a backoff when the provider named no wait, up to
  `RetryPolicy.max_attempts` sends, unless its route fails fast (a fallback's model
  with another after it). A Retry-After over `max_wait` goes back at once.
- **stream**: admitted, sent, retried before its first chunk and recorded at its `Done`,
  exactly as a complete; past its first chunk a failure is the caller's.
- **books**: a request sent more than once lists its sends on the reply's `attempts`
  (the failed ones, and the one that answered when a 429 was waited out), the failed
  ones counted as requests billed at nothing; the request's record
  (`RequestContext.record`) gets its rate wait, its 429s and its sends.

Models that declare no provider limits (the in-process test doubles) are sent as they
are, with nothing to admit them under.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from ..abort import abortable
from ..errors import ProviderError, RateLimitError, RaygentError
from ..models.contract import (
    Done,
    Limits,
    ModelResponse,
    ProviderModel,
    StreamChunk,
    Tier,
    as_provider_model,
    with_failed,
)
from .link import Access, closing_stream
from .request import ModelRequest

__all__ = ["AccessLayer", "Admission", "Admissions", "RetryPolicy"]


@dataclass(frozen=True)
class RetryPolicy:
    """How 429s are sent again (both backends): at most `max_attempts` sends per
    request; a Retry-After over `max_wait` seconds is not waited for (the error goes
    back at once); without Retry-After, exponential backoff from `backoff` seconds,
    with jitter."""

    max_attempts: int = 8
    max_wait: float = 60.0
    backoff: float = 0.5

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, not {self.max_attempts}")

    def backoff_after(self, sends: int) -> float:
        """The wait after send number `sends` was throttled with no Retry-After."""
        return min(self.max_wait, self.backoff * 2.0 ** (sends - 1)) * random.uniform(0.5, 1.0)


class Admission(Protocol):
    """One request let through by a backend's counters, until it is `done`."""

    rate_wait: float  # seconds it waited for its rate

    def answered(self, response: ModelResponse) -> None:
        """It was answered: settle at the reply's use; learn what its headers say."""

    def throttled(self, error: RateLimitError, pause: float | None) -> None:
        """A 429 (not a refusal for capacity): pause every holder for `pause` seconds
        (None: nobody), so that the next admission waits it out; learn lower limits."""

    def failed(self) -> None:
        """An error reply (a refusal for capacity included): it used nothing."""

    def done(self) -> None:
        """It ended, however: its slot goes back (cut off unsettled: counted whole)."""


class Admissions(Protocol):
    """Where a backend's counters live: each endpoint's concurrency bound, each model
    key's rate, the pause after a 429."""

    async def admit(self, request: ModelRequest, limits: Limits) -> Admission:
        """Wait (abortably, by the request's signal) until `request` may go under its
        model's `limits`."""
        ...


class AccessLayer(Access):
    """The access layer (see the module docstring) over a backend's `admissions`."""

    __slots__ = ("admissions", "policy")

    def __init__(self, admissions: Admissions, policy: RetryPolicy | None = None) -> None:
        self.admissions = admissions
        self.policy = policy or RetryPolicy()

    async def send(self, request: ModelRequest) -> ModelResponse:
        model = request.model
        provider = as_provider_model(model)
        if provider is None:
            return await model.complete(request.messages, request.options, signal=request.signal)
        books = _Books(request, provider, self.policy)
        while True:
            books.started = time.perf_counter()
            admission = books.admitted(await self.admissions.admit(books.request, books.limits))
            asked = books.request
            try:
                response = await model.complete(asked.messages, asked.options, signal=asked.signal)
            except ProviderError as exc:
                wait = books.failed(exc, admission)
            else:
                admission.answered(response)
                return books.answered(response)
            finally:
                admission.done()
            await books.again(wait)

    async def send_stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        model = request.model
        provider = as_provider_model(model)
        if provider is None:
            chunks = model.stream(request.messages, request.options, signal=request.signal)
            async with closing_stream(chunks):
                async for chunk in chunks:
                    yield chunk
            return
        books = _Books(request, provider, self.policy)
        while True:
            books.started = time.perf_counter()
            admission = books.admitted(await self.admissions.admit(books.request, books.limits))
            asked, yielded = books.request, False
            try:
                chunks = model.stream(asked.messages, asked.options, signal=asked.signal)
                async with closing_stream(chunks):
                    async for chunk in chunks:
                        if isinstance(chunk, Done):
                            admission.answered(chunk.response)
                            chunk = Done(books.answered(chunk.response))
                        yielded = True
                        yield chunk
                return
            except ProviderError as exc:
                # Past its first chunk, part of a reply is out: the failure is the caller's.
                wait = books.failed(exc, admission, again=not yielded)
            finally:
                admission.done()
            await books.again(wait)


def _tiered(request: ModelRequest, provider: ProviderModel) -> tuple[ModelRequest, str | None]:
    """`request` at a plain tier, and the tier to ask for if it is refused for capacity
    (None: none)."""
    tier = request.options.service_tier
    if tier is None:
        tier = provider.default_tier()
    if not isinstance(tier, Tier):
        return request, None
    plain = request.with_options(request.options.model_copy(update={"service_tier": tier.tier}))
    return plain, tier.fallback


class _Books:
    """One request's sends: the request to send next (at the fallback tier once its tier
    was refused), and what the access layer knows of its sends, kept cheaply for the
    common request sent once (a list of `_Send`s only once a second one is made)."""

    __slots__ = ("_waited", "fallback", "limits", "policy", "request", "sends", "sent", "started")

    def __init__(self, request: ModelRequest, provider: ProviderModel, policy: RetryPolicy) -> None:
        self.request, self.fallback = _tiered(request, provider)
        self.limits, self.policy = provider.limits(), policy
        self.sends: list[_Send] | None = None
        self.started = self.sent = 0.0
        self._waited = False  # a 429 was waited out

    def admitted(self, admission: Admission) -> Admission:
        """The request was admitted (`started` is when it asked)."""
        self.sent = time.perf_counter()
        record = self.request.context.record
        if record is not None:
            record.sends += 1
            if admission.rate_wait:
                record.rate_wait += admission.rate_wait
        return admission

    def failed(self, error: ProviderError, admission: Admission, again: bool = True) -> float:
        """An error reply: settle the admission; the seconds to wait before sending
        again (0: at once), or raise the error (given up)."""
        send = self._failed_send(error)
        if isinstance(error, RateLimitError) and not error.for_capacity:
            record = self.request.context.record
            if record is not None:
                record.throttled += 1
            if again:
                wait = self._throttled(error, admission, send)
                if wait is not None:
                    return wait
                raise self._gave_up(error) from None
        admission.failed()  # (a tier full: no pause, no rate learnt)
        if again and isinstance(error, RateLimitError) and self.fallback is not None:
            send.tier = (self.request.options.service_tier, self.fallback)
            options = self.request.options.model_copy(update={"service_tier": self.fallback})
            self.request, self.fallback = self.request.with_options(options), None
            return 0.0
        raise self._gave_up(error) from None

    def _throttled(self, error: RateLimitError, admission: Admission, send: _Send) -> float | None:
        """After a 429: pause the counters; the wait before the next send, or None."""
        policy = self.policy
        found = error.details.get("retry_after")
        retry_after = float(found) if isinstance(found, (int, float)) else None
        if retry_after is not None and retry_after > policy.max_wait:
            admission.throttled(error, None)  # not worth holding anyone for: back now
            return None
        admission.throttled(error, retry_after)
        if self.request.route.fail_fast or send.number >= policy.max_attempts:
            return None
        self._waited = True
        if retry_after is not None:
            send.wait = retry_after
            return 0.0  # the pause is the wait: the next admission waits it out
        send.wait = policy.backoff_after(send.number)
        return send.wait

    async def again(self, wait: float) -> None:
        if wait:
            await abortable(asyncio.sleep(wait), self.request.signal)

    def _failed_send(self, error: RaygentError) -> _Send:
        send = _Send(len(self.sends or ()) + 1, self.started, self.sent, time.perf_counter())
        send.error = error
        if self.sends is None:
            self.sends = []
        self.sends.append(send)
        return send

    def answered(self, response: ModelResponse) -> ModelResponse:
        sends = self.sends
        if sends is None:
            return response
        model = self.request.model
        listed = [send.entry(model.name, model.provider) for send in sends]
        if self._waited:  # the send that answered, with its wait and timing
            last = _Send(len(sends) + 1, self.started, self.sent, time.perf_counter())
            listed.append(last.entry(model.name, model.provider))
        return with_failed(response, listed, len(sends))

    def _gave_up(self, error: RaygentError) -> RaygentError:
        if self.sends is not None and len(self.sends) > 1:
            error.details["attempts"] = len(self.sends)
        return error


class _Send:
    """One send of a request that was sent more than once: how long it waited to be
    admitted (`queued`: the pause, the rate, a slot), how long the provider took, how it
    ended, and the wait chosen before the next send."""

    __slots__ = ("ended", "error", "number", "sent", "started", "tier", "wait")

    def __init__(self, number: int, started: float, sent: float, ended: float) -> None:
        self.number, self.started, self.sent, self.ended = number, started, sent, ended
        self.error: RaygentError | None = None
        self.wait: float | None = None
        self.tier: tuple[Any, str] | None = None  # (refused, fallback) for capacity

    def entry(self, model: str, provider: str) -> dict[str, Any]:
        """Its entry on the reply's `attempts`: the keys of a fallback's failed model
        (model, provider, error), the send's own facts, and for a tier refused for
        capacity, the tier and its fallback."""
        error = self.error
        entry: dict[str, Any] = {
            "model": model,
            "provider": provider,
            "error": None if error is None else error.to_dict(),
            "attempt": self.number,
            "ok": error is None,
            "status": None if error is None else error.details.get("status"),
            "code": None if error is None else error.code,
            "retry_after": None if error is None else error.details.get("retry_after"),
            "wait": self.wait,
            "queued": round(self.sent - self.started, 6),
            "duration": round(self.ended - self.sent, 6),
        }
        if self.tier is not None:
            entry["service_tier"], entry["fallback"] = self.tier
        return entry

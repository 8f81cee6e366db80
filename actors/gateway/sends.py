"""Sending one request inside a lease: admission, 429 retries, and the trip's record.

On the Ray backend a request is sent by the process that runs the agent, inside a slot
of its `EndpointLease`. A 429 pauses this lease at once and tells the gateway (which
pauses every other holder and lowers the endpoint's adaptive limit); the request is sent
again after the Retry-After (or a backoff), up to `RetryPolicy.max_attempts` sends.
Errors other than 429 go back at once, typed.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from raygent.backend import (
    AbortSignal,
    Cost,
    Done,
    Message,
    Model,
    ModelOptions,
    ModelResponse,
    RateLimitError,
    RateReading,
    RaygentError,
    StreamChunk,
    Usage,
    abortable,
    closing_stream,
    need_of,
    note_throttled,
    note_wait,
    rate_estimate,
    reading_of_error,
)

from .._options import RetryPolicy
from .lease import ONE_REQUEST, EndpointLease, Ticket
from .rate_budget import Rates

__all__ = ["Send", "Sends", "send_complete", "send_stream"]


@dataclass
class Send:
    """One send of a request: how long it waited to be admitted (`queued`: the pause,
    the rate budget, a slot), how long the provider took, how it ended, and the wait
    chosen before the next send."""

    number: int
    started: float = field(default_factory=time.perf_counter)
    sent: float | None = None
    ended: float | None = None
    error: RaygentError | None = None
    wait: float | None = None

    def admitted(self) -> None:
        self.sent = time.perf_counter()

    def failed(self, error: RaygentError) -> None:
        self.ended, self.error = time.perf_counter(), error

    def record(self, model: Model) -> dict[str, Any]:
        """The trip report's entry: the keys of a fallback's failed attempt (model,
        provider, error) and the send's own facts."""
        ended = self.ended if self.ended is not None else time.perf_counter()
        sent = self.sent if self.sent is not None else ended
        error = self.error
        return {
            "model": model.name,
            "provider": model.provider,
            "error": None if error is None else error.to_dict(),
            "attempt": self.number,
            "ok": error is None,
            "status": None if error is None else error.details.get("status"),
            "code": None if error is None else error.code,
            "retry_after": None if error is None else error.details.get("retry_after"),
            "wait": self.wait,
            "queued": round(sent - self.started, 6),
            "duration": round(ended - sent, 6),
        }


class Sends:
    """The sends of one request.

    A request answered at its first send is left as it is (as on the local backend,
    `attempts` stays empty). One sent again (429s retried) lists every send on the
    response's `attempts`, the failed ones first, the one that answered last; the
    failed sends count as requests at no cost, as a fallback model counts its failed
    attempts. A request given up on carries `attempts` (how many sends) in its error.
    """

    def __init__(self, model: Model) -> None:
        self.model = model
        self.sends: list[Send] = []

    def start(self) -> Send:
        send = Send(len(self.sends) + 1)
        self.sends.append(send)
        return send

    def answered(self, response: ModelResponse) -> ModelResponse:
        if len(self.sends) < 2:
            return response
        self.sends[-1].ended = time.perf_counter()
        attempts = [send.record(self.model) for send in self.sends]
        failed = len(self.sends) - 1
        usage = (
            response.usage + Usage(requests=failed, cost=Cost())
            if response.usage.cost is not None
            else response.usage.model_copy(update={"requests": response.usage.requests + failed})
        )
        return response.model_copy(
            update={"attempts": [*attempts, *response.attempts], "usage": usage}
        )

    def gave_up(self, error: RaygentError) -> RaygentError:
        if len(self.sends) > 1:
            error.details["attempts"] = len(self.sends)
        return error


def used(model: Model, response: ModelResponse, options: ModelOptions) -> Rates:
    """What a request used, as providers count it: its input (Anthropic's without
    cache reads), tokens as OpenAI counts them at admission (the output cap asked for,
    or the output if larger), output tokens as produced (Anthropic's)."""
    usage = response.usage
    prompt, output = float(usage.total_input_tokens), float(usage.output_tokens)
    fresh = prompt - usage.cached_tokens if model.provider == "anthropic" else prompt
    return (1.0, prompt + max(output, float(options.max_tokens or 0)), fresh, output)


@dataclass(eq=False)
class _Admission:
    """A request let through: its slot of the endpoint's bound and, when its model's
    rate is held, its rate budget (a ticket of the rate's own lease)."""

    lease: EndpointLease
    slot: Ticket
    rates: EndpointLease | None = None
    paced: Ticket | None = None

    def answered(self, model: Model, response: ModelResponse, options: ModelOptions) -> None:
        self.slot.ok = True
        if self.paced is not None:
            self.paced.ok, self.paced.observed = True, response.rate
            self.paced.used = used(model, response, options)

    def throttled(self, retry_after: float | None, reading: RateReading | None) -> None:
        self.lease.throttled(self.slot, retry_after)
        if self.rates is not None and self.paced is not None:
            self.rates.throttled(self.paced, retry_after, reading)

    def done(self) -> None:
        self.lease.done(self.slot)
        if self.rates is not None and self.paced is not None:
            self.rates.done(self.paced)


def _throttled(
    admission: _Admission,
    exc: RateLimitError,
    attempt: int,
    most: int,
    policy: RetryPolicy,
    send: Send,
) -> float | None:
    """After a 429: pause here and tell the gateway. Returns how long to back off
    before the next send (0: the pause is the wait), None if there should be none."""
    found = exc.details.get("retry_after")
    retry_after = float(found) if isinstance(found, (int, float)) else None
    reading = reading_of_error(exc)
    note_throttled()
    if retry_after is not None and retry_after > policy.max_wait:
        admission.throttled(None, reading)  # not worth holding anyone for: back now
        return None
    admission.throttled(retry_after, reading)
    if attempt >= most:
        return None
    if retry_after is not None:
        send.wait = retry_after  # in the pause, before the next admission
        return 0.0
    send.wait = min(policy.max_wait, policy.backoff * 2 ** (attempt - 1))
    send.wait *= random.uniform(0.5, 1.0)
    return send.wait


def _plan(
    rates: EndpointLease | None,
    model: Model,
    messages: Sequence[Message],
    options: ModelOptions,
    policy: RetryPolicy,
    retries: bool,
) -> tuple[Rates, Sends, int]:
    """A request's rate estimate, its record of sends, and how many sends at most."""
    need = ONE_REQUEST
    if rates is not None and rates.counts_tokens():
        need = need_of(*rate_estimate(messages, options, model))
    return need, Sends(model), policy.max_attempts if retries else 1


async def _ticket(lease: EndpointLease, need: Rates, signal: AbortSignal | None) -> Ticket:
    """At once when there is room; else, abortably, once the pause is over and room is
    handed over."""
    ticket = lease.admit_now(need)
    if ticket is not None:
        return ticket
    await abortable(lease.paused(), signal)
    return await abortable(lease.admit(need), signal)


async def _admitted(
    lease: EndpointLease, rates: EndpointLease | None, need: Rates, signal: AbortSignal | None
) -> _Admission:
    """A slot first, then the rate budget, sent at once: budget taken first and then
    held while waiting for a slot would be sent late, in a burst with the next (429s)."""
    slot = await _ticket(lease, ONE_REQUEST, signal)
    try:
        paced = None
        if rates is not None:
            waited = time.perf_counter()
            paced = await _ticket(rates, need, signal)
            if rates.holds_rate():  # a limit held it back, not the lease's first grant
                note_wait(time.perf_counter() - waited)
    except BaseException:
        lease.done(slot)
        raise
    return _Admission(lease, slot, rates, paced)


async def send_complete(
    lease: EndpointLease,
    model: Model,
    messages: Sequence[Message],
    options: ModelOptions,
    signal: AbortSignal | None,
    policy: RetryPolicy,
    retries: bool,
    rates: EndpointLease | None = None,
) -> ModelResponse:
    """`model.complete` inside the lease (and the rate's, `rates`); 429s retried
    unless `retries` is False."""
    cost, sends, most = _plan(rates, model, messages, options, policy, retries)
    for attempt in range(1, most + 1):
        send = sends.start()
        admission = await _admitted(lease, rates, cost, signal)
        try:
            send.admitted()
            response = await model.complete(messages, options, signal=signal)
        except RateLimitError as exc:
            send.failed(exc)
            backoff = (
                None
                if exc.for_capacity
                else _throttled(admission, exc, attempt, most, policy, send)
            )
            if backoff is None:
                raise sends.gave_up(exc) from None
        except RaygentError as exc:
            send.failed(exc)
            raise sends.gave_up(exc) from None
        else:
            admission.answered(model, response, options)
            return sends.answered(response)
        finally:
            admission.done()
        if backoff:
            await abortable(asyncio.sleep(backoff), signal)
    raise AssertionError("unreachable: the last attempt returns or raises")


async def send_stream(
    lease: EndpointLease,
    model: Model,
    messages: Sequence[Message],
    options: ModelOptions,
    signal: AbortSignal | None,
    policy: RetryPolicy,
    retries: bool,
    rates: EndpointLease | None = None,
) -> AsyncIterator[StreamChunk]:
    """`model.stream` inside the lease (and the rate's); a 429 is retried only before
    anything was yielded (afterwards the caller has seen part of a reply)."""
    cost, sends, most = _plan(rates, model, messages, options, policy, retries)
    for attempt in range(1, most + 1):
        send = sends.start()
        admission = await _admitted(lease, rates, cost, signal)
        yielded, backoff = False, None
        try:
            send.admitted()
            chunks = model.stream(messages, options, signal=signal)
            async with closing_stream(chunks):
                async for chunk in chunks:
                    if isinstance(chunk, Done):
                        admission.answered(model, chunk.response, options)
                        chunk = Done(sends.answered(chunk.response))
                    yielded = True
                    yield chunk
            return
        except RateLimitError as exc:
            send.failed(exc)
            if not yielded and not exc.for_capacity:
                backoff = _throttled(admission, exc, attempt, most, policy, send)
            if backoff is None:
                raise sends.gave_up(exc) from None
        except RaygentError as exc:
            send.failed(exc)
            raise sends.gave_up(exc) from None
        finally:
            admission.done()
        if backoff:
            await abortable(asyncio.sleep(backoff), signal)

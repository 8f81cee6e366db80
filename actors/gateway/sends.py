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

import pydantic_core

from raygent.backend import (
    AbortSignal,
    Cost,
    Done,
    Message,
    Model,
    ModelOptions,
    ModelResponse,
    RateLimitError,
    RaygentError,
    StreamChunk,
    Usage,
    abortable,
    closing_stream,
)

from .._options import RetryPolicy
from .lease import ONE_REQUEST, EndpointLease, Ticket
from .rate_budget import NO_LIMITS, Limits, Rates

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


def estimate(messages: Sequence[Message], options: ModelOptions) -> Rates:
    """The rate budget a request needs before it is sent: one request, and its tokens
    as providers count them for admission (the prompt, ~4 bytes of JSON a token, plus
    the output cap), input and output apart. The real usage settles it afterwards."""
    prompt = float(len(pydantic_core.to_json(list(messages))) // 4)
    output = float(options.max_tokens or 0)
    return (1.0, prompt + output, prompt, output)


def used(response: ModelResponse, options: ModelOptions) -> Rates:
    """What a request used, as providers count it: its input, and for tokens (OpenAI's
    count, made at admission) the output cap it asked for, or its output if larger;
    output tokens (Anthropic's) as produced."""
    usage = response.usage
    prompt, output = float(usage.total_input_tokens), float(usage.output_tokens)
    return (1.0, prompt + max(output, float(options.max_tokens or 0)), prompt, output)


def observed(response: ModelResponse) -> Limits:
    """The provider's limits per minute, as its reply's headers named them (None for
    each it did not name)."""
    reading = getattr(response, "rate", None)
    if reading is None:
        return NO_LIMITS
    return (
        getattr(reading, "requests_per_minute", None),
        getattr(reading, "tokens_per_minute", None),
        getattr(reading, "input_tokens_per_minute", None),
        getattr(reading, "output_tokens_per_minute", None),
    )


def _throttled(
    lease: EndpointLease,
    ticket: Ticket,
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
    if retry_after is not None and retry_after > policy.max_wait:
        lease.throttled(ticket, None)  # not worth holding anyone for: it goes back now
        return None
    lease.throttled(ticket, retry_after)
    if attempt >= most:
        return None
    if retry_after is not None:
        send.wait = retry_after  # in the pause, before the next admission
        return 0.0
    send.wait = min(policy.max_wait, policy.backoff * 2 ** (attempt - 1))
    send.wait *= random.uniform(0.5, 1.0)
    return send.wait


def _plan(
    lease: EndpointLease,
    model: Model,
    messages: Sequence[Message],
    options: ModelOptions,
    policy: RetryPolicy,
    retries: bool,
) -> tuple[Rates, Sends, int]:
    """A request's rate estimate, its record of sends, and how many sends at most."""
    need = estimate(messages, options) if lease.counts_tokens() else ONE_REQUEST
    return need, Sends(model), policy.max_attempts if retries else 1


def _answered(ticket: Ticket, response: ModelResponse, options: ModelOptions) -> None:
    ticket.ok, ticket.observed = True, observed(response)
    ticket.used = used(response, options)


async def _admitted(lease: EndpointLease, cost: Rates, signal: AbortSignal | None) -> Ticket:
    """A slot: at once when one is free; else, abortably, once the pause is over and a
    slot is handed over."""
    ticket = lease.admit_now(cost)
    if ticket is not None:
        return ticket
    await abortable(lease.paused(), signal)
    return await abortable(lease.admit(cost), signal)


async def send_complete(
    lease: EndpointLease,
    model: Model,
    messages: Sequence[Message],
    options: ModelOptions,
    signal: AbortSignal | None,
    policy: RetryPolicy,
    retries: bool,
) -> ModelResponse:
    """`model.complete` inside the lease; 429s retried unless `retries` is False."""
    cost, sends, most = _plan(lease, model, messages, options, policy, retries)
    for attempt in range(1, most + 1):
        send = sends.start()
        ticket = await _admitted(lease, cost, signal)
        try:
            send.admitted()
            response = await model.complete(messages, options, signal=signal)
        except RateLimitError as exc:
            send.failed(exc)
            backoff = _throttled(lease, ticket, exc, attempt, most, policy, send)
            if backoff is None:
                raise sends.gave_up(exc) from None
        except RaygentError as exc:
            send.failed(exc)
            raise sends.gave_up(exc) from None
        else:
            _answered(ticket, response, options)
            return sends.answered(response)
        finally:
            lease.done(ticket)
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
) -> AsyncIterator[StreamChunk]:
    """`model.stream` inside the lease; a 429 is retried only before anything was
    yielded (afterwards the caller has seen part of a reply)."""
    cost, sends, most = _plan(lease, model, messages, options, policy, retries)
    for attempt in range(1, most + 1):
        send = sends.start()
        ticket = await _admitted(lease, cost, signal)
        yielded, backoff = False, None
        try:
            send.admitted()
            chunks = model.stream(messages, options, signal=signal)
            async with closing_stream(chunks):
                async for chunk in chunks:
                    if isinstance(chunk, Done):
                        _answered(ticket, chunk.response, options)
                        chunk = Done(sends.answered(chunk.response))
                    yielded = True
                    yield chunk
            return
        except RateLimitError as exc:
            send.failed(exc)
            if not yielded:
                backoff = _throttled(lease, ticket, exc, attempt, most, policy, send)
            if backoff is None:
                raise sends.gave_up(exc) from None
        except RaygentError as exc:
            send.failed(exc)
            raise sends.gave_up(exc) from None
        finally:
            lease.done(ticket)
        if backoff:
            await abortable(asyncio.sleep(backoff), signal)

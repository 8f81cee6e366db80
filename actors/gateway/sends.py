"""Admitting one request inside this process's leases: the Ray backend's admission.

A request to a bounded endpoint takes a slot of its `EndpointLease` and then, when its
model's rate is held, its rate budget from the rate's own lease; it is sent at once
(budget taken first and then held while waiting for a slot would be sent late, in a
burst with the next: 429s). The core's access layer (`raygent.backend.AccessLayer`) does
the rest, as on every backend: the send, its 429s (a 429 pauses this lease at once and
tells the gateway, which pauses every other holder and lowers the endpoint's adaptive
limit), the tier's fallback, the request's record.
"""

from __future__ import annotations

import time

from raygent.backend import (
    DEFAULT_PAUSE,
    AbortSignal,
    ModelRequest,
    ModelResponse,
    RateLimitError,
    abortable,
    need_of,
    rate_estimate,
    reading_of_error,
    wait_held_back,
)

from .lease import ONE_REQUEST, EndpointLease, Ticket
from .rate_budget import Rates

__all__ = ["LeasedAdmission", "admitted", "used"]


def used(request: ModelRequest, response: ModelResponse) -> Rates:
    """What a request used, as providers count it: its input (Anthropic's without
    cache reads), tokens as OpenAI counts them at admission (the output cap asked for,
    or the output if larger), output tokens as produced (Anthropic's)."""
    usage = response.usage
    prompt, output = float(usage.total_input_tokens), float(usage.output_tokens)
    fresh = prompt - usage.cached_tokens if request.model.provider == "anthropic" else prompt
    cap = float(request.options.max_tokens or 0)
    return (1.0, prompt + max(output, cap), fresh, output)


class LeasedAdmission:
    """A request let through (`raygent.backend.Admission`): its slot of the endpoint's
    bound and, when its model's rate is held, its rate budget (a ticket of the rate's
    own lease)."""

    __slots__ = ("lease", "paced", "rate_wait", "rates", "request", "slot")

    def __init__(
        self,
        request: ModelRequest,
        lease: EndpointLease,
        slot: Ticket,
        rates: EndpointLease | None,
        paced: Ticket | None,
        rate_wait: float,
    ) -> None:
        self.request, self.lease, self.slot = request, lease, slot
        self.rates, self.paced, self.rate_wait = rates, paced, rate_wait

    def answered(self, response: ModelResponse) -> None:
        self.slot.ok = True
        paced = self.paced
        if paced is not None:
            paced.ok, paced.observed = True, response.rate
            paced.used = used(self.request, response)

    def throttled(self, error: RateLimitError, pause: float | None) -> None:
        reading = reading_of_error(error)
        if pause is None and error.details.get("retry_after") is None:
            # A 429 that names no wait (Bedrock's ThrottlingException: no Retry-After, no
            # headers) pauses every holder for a second's share to refill, as the local
            # backend's pacer does (`DEFAULT_PAUSE`). Without it nobody paused on Ray:
            # the holders' next sends met the same spent window, a storm of throttles
            # with each request's own backoff the only wait. (None with a retry-after
            # is one over the retry policy's `max_wait`: a quota, nobody pauses.)
            pause = DEFAULT_PAUSE
        if self.rates is not None and self.paced is not None:
            # A known rate paced over windows: the holders pause for its slack only,
            # and this request waits out its retry-after by itself.
            said, pause = pause, self.rates.pause_after(pause, reading)
            if said is not None and pause is not None and pause < said:
                now = time.monotonic()
                self.rates.held_back.hold(self.request, now + said, now)
            self.rates.throttled(self.paced, pause, reading)
        self.lease.throttled(self.slot, pause)

    def failed(self) -> None:
        """An error reply: the lease keeps what it took (its use is unknown)."""

    def done(self) -> None:
        self.lease.done(self.slot)
        if self.rates is not None and self.paced is not None:
            self.rates.done(self.paced)


async def _ticket(lease: EndpointLease, need: Rates, signal: AbortSignal | None) -> Ticket:
    """At once when there is room; else, abortably, once the pause is over and room is
    handed over."""
    ticket = lease.admit_now(need)
    if ticket is not None:
        return ticket
    await abortable(lease.paused(), signal)
    return await abortable(lease.admit(need), signal)


async def admitted(
    request: ModelRequest, lease: EndpointLease, rates: EndpointLease | None
) -> LeasedAdmission:
    """`request` admitted: a slot first, then the rate budget (see the module docstring)."""
    signal = request.signal
    held_back = 0.0 if rates is None else await wait_held_back(rates.held_back, request, signal)
    tenant = request.context.tenant  # the lease asks for its tenants' weights together
    lease.tenants[tenant.name if tenant else ""] = tenant.weight if tenant else 1.0
    slot = await _ticket(lease, ONE_REQUEST, signal)
    if rates is None:
        return LeasedAdmission(request, lease, slot, None, None, 0.0)
    try:
        need = ONE_REQUEST
        if rates.counts_tokens():
            need = need_of(*rate_estimate(request.messages, request.options, request.model))
        waited = time.perf_counter()
        paced = await _ticket(rates, need, signal)
    except BaseException:
        lease.done(slot)
        raise
    # A wait for the lease's first grant is no rate's: only a limit that held it back.
    waited = time.perf_counter() - waited if rates.holds_rate() else 0.0
    return LeasedAdmission(request, lease, slot, rates, paced, waited + held_back)

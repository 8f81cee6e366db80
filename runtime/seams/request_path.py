"""A run's request path: the links a model request passes through, built in one place.

    trip ─▶ cache ─▶ route ─┬─ by batch ─▶ budget (batch rates) ─▶ line of a provider batch
                            └─ online ───▶ budget (online rates) ─▶ access (backend.models)

    access: tier ─▶ admit (bound, rate, pause) ─▶ send ─▶ settle and record | 429: again

`request_path(...)` builds it from a run's options, adding a link only for a feature the
run asks for: with no cache, no budget and no provider batch a trip gets the backend's
own access, and nothing of the other features runs per request. The order, and why:

- **cache** first: a hit sends nothing, so it reserves nothing and costs nothing; each
  model's reply is kept under that model's own request key.
- **route** (`BatchOrOnline`, a provider-batch job's trip, or a job with a deadline):
  decides once per request whether it goes as a line of a provider batch or online (a
  deadline's route: at which tier), so that its reservation is at the rates of where it
  goes; a line its provider did not answer that is to go online after all
  (`on_expired="online"`, a late batch) is released from the batch branch and sent down
  the online one.
- **budget**: reserves the request's worst case before it is sent and settles at the
  real usage after; a request that is never billed (an error reply, a line that expired
  or failed) releases its reservation.
- **access**: the backend's access layer (below).

Under the chain, the backend's access layer (`seams.access`) admits each request (its
endpoint's bound, its rate, the pause after a 429), sends it, retries its 429s and
applies its tier's fallback: written once for both backends, which differ only in where
their counters live.

Every link (and the access layer) derives from `Link`'s base, which splits a composite
model (a fallback) once: the outermost link sends each of its models' requests down the
whole chain as a single model's, so each link's own logic is written for one model. The
request (`ModelRequest`) carries its context and its route (batch or online, which model
of a fallback, fail fast or not), so that a link or the layer reads what it needs off
the request, never off the model or a context variable.

To add a feature to every model request: one link here (or one step of the access layer
for what concerns admission), in one place, in the documented order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from ..budgets import BudgetLedger
from ..models.contract import Done, ModelResponse, StreamChunk
from .budgeted import BudgetedAccess
from .contract import ModelAccess
from .link import Link
from .provider_lines import SendOnline, TripLines
from .request import ModelRequest, Route

__all__ = ["BatchOrOnline", "Cache", "Link", "request_path"]


class Cache(Protocol):
    """A response cache as the request path uses it (`raygent.ResponseCache`)."""

    def around(self, models: ModelAccess) -> ModelAccess: ...


def request_path(
    bound: ModelAccess,
    *,
    cache: Cache | None = None,
    ledgers: Sequence[BudgetLedger] = (),
    lines: TripLines | None = None,
    trip: int = 0,
) -> ModelAccess:
    """The model access of one trip (number `trip`) of a run: `bound` (the backend's
    access) behind the links the run's features need, in the order the module's
    docstring draws. `lines`: the attempt's provider-batch lines (None: online)."""
    held = tuple(ledgers)
    online = BudgetedAccess(bound, held) if held else bound
    access: ModelAccess = online
    if lines is not None:
        by_batch = lines.sender(trip)
        if held:
            by_batch = BudgetedAccess(by_batch, held, batch=True)
        access = BatchOrOnline(lines, online, by_batch)
    return access if cache is None else cache.around(access)


class BatchOrOnline(Link):
    """A provider-batch job's trip: each request goes by batch (where its model has a
    batch API and the job's options let it) or online, decided once per request."""

    __slots__ = ("by_batch", "lines")

    def __init__(self, lines: TripLines, online: ModelAccess, by_batch: ModelAccess) -> None:
        super().__init__(online)
        self.lines, self.by_batch = lines, by_batch

    async def send(self, request: ModelRequest) -> ModelResponse:
        route = request.route
        if self.lines.by_batch(request.model, first=route.position == 0):
            try:
                return await self.by_batch.complete(
                    request.going(Route(True, route.position, route.fail_fast))
                )
            except SendOnline:
                pass  # not answered, and to go online now: at online rates
        self.lines.note_online()
        # A job with a deadline sends it at the tier its route chooses (flex, priority).
        options = self.lines.online_options(request.model, request.options)
        if options is not request.options:
            request = request.with_options(options)
        return await self.inner.complete(request)

    async def send_stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        # A provider-batch trip's reply comes whole: its stream is that reply.
        yield Done(await self.send(request))

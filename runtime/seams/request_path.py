"""A run's request path: the links a model request passes through, built in one place.

    trip ─▶ cache ─▶ route ─┬─ by batch ─▶ budget (batch rates) ─▶ line of a provider batch
                            └─ online ───▶ budget (online rates) ─▶ bound (backend.models)

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
- **bound**: the backend's access holds the provider's concurrency (and on Ray leases it
  from the gateway).

Every link derives from `Link`, which routes a fallback model once: the outermost link
splits it into its models, and each model's attempt goes down the whole chain as a single
model, so each link's own logic is written for one model. `failing_fast()` (Ray's access
retries a 429 itself; a fallback's non-last models must fail fast instead) is passed down
to the bound through every link.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from ..abort import AbortSignal
from ..budgets import BudgetLedger
from ..messages import Message
from ..models.contract import Done, Model, ModelOptions, ModelResponse, StreamChunk
from .budgeted import BudgetedAccess
from .contract import ModelAccess
from .link import Link
from .provider_lines import SendOnline, TripLines

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

    __slots__ = ("asked", "by_batch", "lines")

    def __init__(self, lines: TripLines, online: ModelAccess, by_batch: ModelAccess) -> None:
        super().__init__(online)
        self.lines, self.by_batch = lines, by_batch
        self.asked = [0]  # the requests of this trip (a fallback's models): shared by copies

    async def send(
        self,
        model: Model,
        messages: Sequence[Message],
        options: ModelOptions,
        signal: AbortSignal | None,
    ) -> ModelResponse:
        asked = self.asked
        asked[0] += 1
        if self.lines.by_batch(model, first=asked[0] == 1):
            try:
                return await self.by_batch.complete(model, messages, options, signal)
            except SendOnline:
                pass  # not answered, and to go online now: at online rates
        self.lines.note_online()
        # A job with a deadline sends it at the tier its route chooses (flex, priority).
        options = self.lines.online_options(model, options)
        return await self.inner.complete(model, messages, options, signal)

    async def send_stream(
        self,
        model: Model,
        messages: Sequence[Message],
        options: ModelOptions,
        signal: AbortSignal | None,
    ) -> AsyncIterator[StreamChunk]:
        # A provider-batch trip's reply comes whole: its stream is that reply.
        yield Done(await self.send(model, messages, options, signal))

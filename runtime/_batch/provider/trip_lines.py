"""Each attempt's way into its job's provider batches: its trips as lines
(`ItemLines`, set around the attempt), sent to the job's pool or, in a process that does
not hold it (a Ray batch runner), to a relay (`RelayedLines`); and what lines cost
(`LineCost`).

A line's `custom_id` names the job's item, the attempt, the trip and the request itself
(a digest of its body): the same run made again (a resumed job) asks by the same id.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol

import pydantic_core

from ...abort import AbortSignal, abortable
from ...errors import CapabilityError, ProviderBatchError, ProviderBatchExpiredError
from ...models.batch_api import BatchAPI, LineResult
from ...models.contract import (
    Done,
    Model,
    ModelOptions,
    ModelResponse,
    StreamChunk,
    Tier,
    as_batch_model,
    as_provider_model,
)
from ...pricing import price_usage
from ...seams.contract import ModelAccess
from ...seams.provider_lines import LineAnswer, LineCost, LineOptions, SendOnline
from ...seams.request import ModelRequest

__all__ = [
    "Answer",
    "GoOnline",
    "ItemLines",
    "LateLine",
    "LineCost",
    "LineSender",
    "RelayedLines",
    "TooFewLines",
    "batch_api_of",
    "line_token",
    "spend_of",
]

logger = logging.getLogger(__name__)

# A line the provider did not answer (expired, cancelled) is sent again this many times
# under on_expired="retry", then fails as "fail" would.
MAX_RESENDS = 3


# A line's answer: its bytes from its batch's results, or a failure the pool made.
Answer = LineAnswer


class GoOnline(ProviderBatchError):
    """A line the pool sends online instead of by batch: the answer a waiting trip
    gets, never an item's error."""


class LateLine(GoOnline):
    """A line its job's route sent online because its batch was late for the deadline
    (the batch is cancelled): the answer a waiting trip gets, never an item's error."""


class TooFewLines(GoOnline):
    """A line of a group that stayed smaller than its batch API's minimum (Bedrock's
    jobs take 100 records at least) once gathered as long as a group may be."""


class Routed(Protocol):
    """What an attempt of a job with a deadline follows: a holder of the job's current
    route (`raygent._batch.routing`: the driver's `RouteJob`, or on a Ray runner the
    `RoutePolicy` the job started with)."""

    @property
    def policy(self) -> Any: ...


def batch_api_of(model: Any) -> BatchAPI | None:
    """The batch API of a model, or None (a model or endpoint without one)."""
    batchable = as_batch_model(model)
    return None if batchable is None else batchable.batch_api()


def line_token(job: str, key: str) -> str:
    """The part of an item's lines' `custom_id`s that names the job and the item."""
    return hashlib.blake2b(f"{job}\0{key}".encode(), digest_size=8).hexdigest()


def _digest(body: bytes) -> str:
    return hashlib.blake2b(body, digest_size=6).hexdigest()


class LineSender(Protocol):
    """Where an attempt sends its lines: the pool itself, or (on Ray) a runner's way
    to the driver's pool. `line` is the line encoded by the model's batch API."""

    async def line(
        self,
        model: Any,
        custom_id: str,
        line: bytes,
        signal: AbortSignal | None,
    ) -> Answer: ...


def spend_of(model: Any, response: ModelResponse) -> LineCost:
    cost = response.usage.cost
    if cost is None:
        return LineCost()
    declared = as_provider_model(model)
    online = price_usage(
        response.usage,
        provider=model.provider,
        model=model.name,
        declared=None if declared is None else declared.declared_pricing(),
    ).cost
    return LineCost(cost.total, None if online is None else online.total)


class RelayedLines:
    """Where the runs of a process that does not hold the job's pool (a Ray batch
    runner) send their lines: they wait in an outbox until its relay takes them (a
    batch at a time, to the pool in the driver), and come back by `answer`."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake
        self._outbox: list[tuple[str, Any, bytes]] = []
        self._waiting: dict[str, asyncio.Future[Answer]] = {}
        self._spend = LineCost()

    async def line(
        self, model: Any, custom_id: str, line: bytes, signal: AbortSignal | None
    ) -> Answer:
        future = self._waiting.get(custom_id)
        if future is None:
            future = self._waiting[custom_id] = asyncio.get_running_loop().create_future()
            self._outbox.append((custom_id, model, line))
            self._wake()
        try:
            return await abortable(asyncio.shield(future), signal)
        finally:
            if future.done():
                self._waiting.pop(custom_id, None)

    @property
    def pending(self) -> bool:
        return bool(self._outbox) or self._spend != LineCost()

    def take(self) -> tuple[list[tuple[str, Any, bytes]], LineCost]:
        """The lines not yet relayed, and the spend counted since the last take."""
        lines, self._outbox = self._outbox, []
        spend, self._spend = self._spend, LineCost()
        return lines, spend

    def answer(self, answers: Sequence[tuple[str, bytes | LineResult, str]]) -> None:
        for custom_id, answer, batch_id in answers:
            future = self._waiting.get(custom_id)
            if future is not None and not future.done():
                future.set_result((answer, batch_id))

    def count(self, model: Any, response: ModelResponse) -> None:
        self._spend.add(spend_of(model, response))

    def note_online(self) -> None:
        self._spend.online_lines += 1
        self._wake()


class ItemLines:
    """One attempt of an item: its trips as lines (`TripLines`, set around the attempt).
    With a `route` (a job with a deadline), each trip goes the way the route says: by
    batch while its batch is likely back in time, else online at the route's tier."""

    __slots__ = (
        "attempt",
        "deadline",
        "online_within",
        "outlet",
        "pool",
        "route",
        "token",
        "trip",
        "way",
    )

    def __init__(
        self,
        sender: LineSender,
        pool_options: LineOptions,
        token: str,
        attempt: int,
        deadline: float | None = None,
        route: Routed | None = None,
        key: str = "",
    ) -> None:
        self.outlet = sender
        self.pool = pool_options
        self.token = token
        self.attempt = attempt
        self.deadline = deadline  # time.time() by which the item must be done
        # A trip this close to its deadline cannot wait for a batch: it goes online.
        self.online_within = pool_options.gather_seconds + 2 * pool_options.poll_seconds
        self.route = route
        self.way = None if route is None else route.policy.way_of(key)
        self.trip = 0  # the trip whose request path was built last (see `sender`)

    def by_batch(self, model: Model, *, first: bool) -> bool:
        """Whether a request to `model` goes by batch: it has a batch API, it is not a
        fallback's next model under `fallback="online"`, and the deadline is not near
        (with a route: the route sends this trip by batch)."""
        if not first and self.pool.fallback == "online":
            return False
        if batch_api_of(model) is None:
            return False
        if self.route is None:
            return not self.must_go_online()
        way, _why = self.route.policy.trip_way(self.way, self.trip, time.time())
        return bool(way == "batch")

    def online_options(self, model: Model, options: ModelOptions) -> ModelOptions:
        """`options` for a request of this attempt that goes online: with a route, at
        the tier of the item's way (an item by batch: the route's rescue); flex with
        standard as its fallback for capacity."""
        route = self.route
        if route is None:
            return options
        policy = route.policy
        way = self.way if self.way not in (None, "batch") else policy.rescue
        tier: str | Tier | None = policy.tier(way)
        if way == "flex":
            tier = Tier("flex", fallback=policy.tier("standard") or "default")
        if tier is None:
            return options
        return options.model_copy(update={"service_tier": tier})

    def sender(self, trip: int) -> ModelAccess:
        # A trip's request path is built just before its requests are sent: the route
        # decides by this trip's number (the attempt's trips go one after another).
        self.trip = trip
        return _LineSend(self, trip)

    def note_online(self) -> None:
        note = getattr(self.outlet, "note_online", None)
        if note is not None:
            note()

    def must_go_online(self) -> bool:
        return self.deadline is not None and self.deadline - time.time() < self.online_within


class _LineSend:
    """Where a trip's requests that go by batch end (the request path's route decided
    so): each is a line of its model's batch API, answered whole."""

    __slots__ = ("lines", "trip")

    def __init__(self, lines: ItemLines, trip: int) -> None:
        self.lines, self.trip = lines, trip

    async def complete(self, request: ModelRequest) -> ModelResponse:
        model = as_batch_model(request.model)
        api = None if model is None else model.batch_api()
        # The route sends here only what has a batch API.
        assert model is not None and api is not None
        lines = self.lines
        # The model's line body: at the batch API's own tier and price, no stream.
        try:
            line_body = model.batch_body(request.messages, request.options)
        except CapabilityError as refused:
            if not str(refused.details.get("capability", "")).startswith("batch_"):
                raise
            # Its batch API cannot carry this request (Bedrock's tools or schema for a
            # model whose jobs take none): it goes online, never billed by batch.
            logger.info("%s", refused)
            raise SendOnline(str(refused)) from None
        body = pydantic_core.to_json(line_body)
        base = f"{lines.token}-a{lines.attempt}-t{self.trip}-{_digest(body)}"
        single = request.model
        for resend in range(MAX_RESENDS + 1):
            custom_id = base if resend == 0 else f"{base}-r{resend}"
            started = time.monotonic()
            line = api.encode(custom_id, body)
            answer, batch_id = await lines.outlet.line(single, custom_id, line, request.signal)
            result = answer if isinstance(answer, LineResult) else api.read_line(answer)
            if result.outcome == "succeeded":
                assert result.body is not None
                response = model.batch_reply(result.body)
                counter = getattr(lines.outlet, "count", None)
                if counter is not None:
                    counter(single, response)
                waited = time.monotonic() - started
                return response.model_copy(update={"via": ("batch", batch_id, waited)})
            if result.outcome == "errored":
                assert result.error is not None
                raise result.error
            mode = lines.pool.on_expired
            if isinstance(result.error, GoOnline) or lines.route is not None:
                mode = "online"  # a route sends it online now, whatever on_expired says
            if mode == "online":  # the route sends it online, released from the batch's
                raise SendOnline(f"{single.provider}: line {custom_id} {result.outcome}")
            if mode == "fail" or resend == MAX_RESENDS:
                raise ProviderBatchExpiredError(
                    f"{single.provider}: line {custom_id} of batch {batch_id} was"
                    f" {result.outcome} before it was answered",
                    provider=single.provider,
                    batch_id=batch_id,
                    custom_id=custom_id,
                    outcome=result.outcome,
                )
        raise AssertionError("unreachable")

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        # A batch line's reply comes whole: its stream is that reply.
        yield Done(await self.complete(request))

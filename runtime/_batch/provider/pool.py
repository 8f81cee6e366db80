"""A job's model trips as lines of provider batches: the pool that gathers, submits,
polls and routes them (`LinePool`; each attempt's way into it: `trip_lines`).

A run's trip asks for its reply by a `custom_id` (see `trip_lines`), with its line
encoded where the run is; the pool answers with the line's bytes from the batch's
results (read where the run is: on Ray, in the runner). The same run made
again (a resumed job) asks by the same id, so a line the ledger knows was sent is waited
for or read back, never sent again. Lines are grouped per endpoint and model, sent once
no line joined them for `gather_seconds` (or the group is full), and
every batch that is out is polled every `poll_seconds`.

With a route (a job with a deadline, `routing`), a batch still out at its cutoff is
late: it is cancelled, and its lines not answered go online (see `late`).

The pool lives where the job is driven (the driver's event loop); on Ray the runners'
runs reach it through their runner (see raygent.actors.batch), a batch of lines a call.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ...abort import AbortSignal, abortable
from ...errors import (
    ProviderBatchError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeoutError,
    ServerError,
)
from ...models.batch_api import BatchAPI, LineResult, MinimumLines, split_results
from ...models.contract import Model, ModelResponse
from ...seams.provider_lines import LineCost
from ..sinks import key_token
from .late import LateBatches, RouteBook, grace_of
from .log import SentBatch, SubmissionLog
from .options import ProviderBatch, ProviderBatchInfo, ProviderBatchSummary
from .trip_lines import Answer, TooFewLines, batch_api_of, line_token, spend_of

__all__ = ["LinePool", "LineRoute", "LinesStatus", "RouteBook", "grace_of"]

logger = logging.getLogger(__name__)
# A group of lines still growing is sent anyway once its first line has waited this
# many gather periods.
GATHER_CAP = 12
# Polls of a batch that fail (a 5xx, a 429, the network) back off up to this many periods.
MAX_BACKOFF = 8.0
_UNCERTAIN = (ProviderTimeoutError, ProviderConnectionError, ServerError)


@dataclass(frozen=True, slots=True)
class LineRoute:
    """Where a model's lines go: its batch API and the group of lines it joins."""

    api: BatchAPI
    key: tuple[Any, ...]

    @classmethod
    def of(cls, model: Any) -> LineRoute | None:
        api = batch_api_of(model)
        if api is None:
            return None
        key = (api.provider, model.base_url, model.key_fingerprint, api.endpoint, model.name)
        return cls(api, key)


def _stamp(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, timezone.utc)


@dataclass(frozen=True, slots=True)
class LinesStatus:
    """Where a job's lines are, for its progress: the batches out (id, provider status),
    how many ended, the lines sent and answered, those gathering for the next batch,
    and the seconds to the next poll (None: nothing out)."""

    out: tuple[tuple[str, str], ...] = ()
    ended: int = 0
    sent: int = 0
    answered: int = 0
    gathering: int = 0
    next_poll: float | None = None


@dataclass(slots=True)
class _Group:
    api: BatchAPI
    first: float  # time.monotonic() of its first line, and of its last
    last: float = 0.0
    model: Any = None  # the model of its lines (to price a line answered twice)
    ids: list[str] = field(default_factory=list)
    lines: list[bytes] = field(default_factory=list)
    size: int = 0
    timer: asyncio.TimerHandle | None = None


@dataclass(slots=True)
class _Out:
    sent: SentBatch
    api: BatchAPI
    info: ProviderBatchInfo
    failures: int = 0
    next_poll: float = 0.0
    model: Any = None
    cutoff: asyncio.TimerHandle | None = None  # with a route: when it is late
    late: bool = False


class LinePool(LateBatches):
    """The provider batches of one job (see the module's docstring)."""

    def __init__(self, options: ProviderBatch, ledger: SubmissionLog, job: str) -> None:
        self.options = options
        self.ledger = ledger
        self.job = job
        self.summary = ProviderBatchSummary()
        self._results: dict[str, Answer] = {}  # answered, not yet asked for
        self._futures: dict[str, asyncio.Future[Answer]] = {}
        # Lines a resumed job finds out in its batches, not asked for again yet.
        self._out_lines: set[str] = set()
        # With `keep_answers` (on Ray), the answers of items not ended yet, by item: a
        # run made again after its runner died asks for them again.
        self.keep_answers = False
        self._answered: dict[str, dict[str, Answer]] = {}
        self._groups: dict[tuple[Any, ...], _Group] = {}
        self._out: dict[str, _Out] = {}
        self._adopted: dict[tuple[str, str], asyncio.Future[None]] = {}
        self._tags = itertools.count(len(ledger.batches))
        self._tasks: set[asyncio.Task[Any]] = set()
        self._poller: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._closed = False
        self._answered_count = 0  # lines whose answer (or failure) came back
        # Told when batches go out, are polled or end (the job's progress shows them).
        self.on_change: Callable[[], None] | None = None
        # A job with a deadline: its route, told of batches and moves (see the module).
        self.routing: RouteBook | None = None
        self._moved: set[str] = set()  # lines sent online while their batch was out

    # -- asking for a line ----------------------------------------------------------

    async def line(
        self, model: Any, custom_id: str, line: bytes, signal: AbortSignal | None
    ) -> Answer:
        route = LineRoute.of(model)
        if route is None:
            raise ProviderBatchError(f"{model!r} has no batch API", provider=model.provider)
        await self._adopt(model, route.api)
        asked = self._ask(route, custom_id, line, model)
        return await abortable(asyncio.shield(asked), signal)

    @staticmethod
    def route(model: Model) -> LineRoute | None:
        """Where `model`'s lines go (None: it has no batch API)."""
        return LineRoute.of(model)

    def line_future(
        self, model: Model, route: object | None, custom_id: str, line: bytes
    ) -> asyncio.Future[Answer]:
        """`line`, for a caller that waits by callback (the Ray relay: no task a line);
        `route` is what `route(model)` gave."""
        if not isinstance(route, LineRoute):
            route = None
        endpoint = None if route is None else (route.key[0], route.key[1])
        adopted = self._adopted.get(endpoint) if endpoint is not None else None
        if route is None or adopted is None or not adopted.done():
            return asyncio.ensure_future(self.line(model, custom_id, line, None))
        return self._ask(route, custom_id, line, model)

    def _ask(
        self, route: LineRoute, custom_id: str, line: bytes, model: Any = None
    ) -> asyncio.Future[Answer]:
        future = self._futures.get(custom_id)
        if future is not None:
            return future
        future = asyncio.get_running_loop().create_future()
        found = self._results.pop(custom_id, None)
        if found is None and self._answered:
            found = self._answered.get(_item_of(custom_id), {}).get(custom_id)
        if found is not None:
            future.set_result(found)
            return future
        self._futures[custom_id] = future
        if custom_id not in self._out_lines:  # else it is out: its batch answers it
            self._add(route, custom_id, line, model)
        return future

    def _add(self, route: LineRoute, custom_id: str, line: bytes, model: Any = None) -> None:
        api, key = route.api, route.key
        cap = min(self.options.max_lines or api.max_lines, api.max_lines)
        size = len(line) + 1  # and its separator
        group = self._groups.get(key)
        if group is not None and group.size + size > api.max_bytes:
            self._flush(key)
            group = None
        now = time.monotonic()
        fresh = group is None
        if group is None:
            group = self._groups[key] = _Group(api, first=now, model=model)
            group.timer = asyncio.get_running_loop().call_later(
                self.options.gather_seconds, self._due, key
            )
        group.last = now
        group.ids.append(custom_id)
        group.lines.append(line)
        group.size += size
        if fresh:
            self._changed()  # a batch begins to gather
        if len(group.lines) >= cap:
            self._flush(key)

    def _due(self, key: tuple[Any, ...]) -> None:
        """A group's timer: sent once no line joined it for `gather_seconds` (runs that
        start over a while, as on a cluster warming up, make one batch, not several),
        or once its first line has waited `GATHER_CAP` times that."""
        group = self._groups.get(key)
        if group is None:
            return
        gather = self.options.gather_seconds
        due = min(group.last + gather, group.first + GATHER_CAP * gather)
        if len(group.lines) < _least(group.api):  # too few yet: gathered as long as it may
            due = group.first + GATHER_CAP * gather
        if due > time.monotonic():
            wait = due - time.monotonic()
            group.timer = asyncio.get_running_loop().call_later(wait, self._due, key)
            return
        self._flush(key)

    def _flush(self, key: tuple[Any, ...]) -> None:
        group = self._groups.pop(key, None)
        if group is None or not group.lines:
            return
        if group.timer is not None:
            group.timer.cancel()
        least = _least(group.api)
        if len(group.lines) < least:
            self._too_few(group, least)
            return
        self._spawn(self._submit(key, group))

    def _too_few(self, group: _Group, least: int) -> None:
        """A group its batch API would refuse as too small, gathered as long as a group
        may be: its lines go online, and the job's report says why."""
        api = group.api
        note = (
            f"{api.provider}: {len(group.lines)} lines sent online: a batch takes at least"
            f" {least} (gathered for {GATHER_CAP * self.options.gather_seconds:g}s)"
        )
        logger.warning("%s", note)
        self.summary.notes.append(note)
        error = TooFewLines(note, provider=api.provider)
        for custom_id in group.ids:
            self._settle(custom_id, LineResult(custom_id, "expired", error=error), "online")
        self._changed()

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- submitting -----------------------------------------------------------------

    async def _submit(self, key: tuple[Any, ...], group: _Group) -> None:
        api = group.api
        tag = f"rg-{self.job[:12]}-{next(self._tags)}"
        ids = group.ids
        sent = SentBatch(tag, api.provider, key[1], api.endpoint, ids, time.time())
        self.ledger.submitting(sent)
        try:
            batch_id = await api.submit(group.lines, tag)
        except ProviderError as exc:
            found: str | None = None
            if isinstance(exc, _UNCERTAIN):  # it may have been made: look before failing
                with contextlib.suppress(ProviderError):
                    found = await api.find(tag, sent.at, len(ids))
            if found is None:
                logger.warning("%s batch %s not submitted: %s", api.provider, tag, exc)
                self._fail(ids, tag, _refused(exc, api.provider, tag))
                return
            batch_id = found
        except Exception as exc:
            logger.warning("%s batch %s not submitted: %r", api.provider, tag, exc)
            error = ProviderBatchError(
                f"{api.provider}: could not submit batch {tag}: {type(exc).__name__}: {exc}",
                provider=api.provider,
            )
            self._fail(ids, tag, error)
            return
        self._track(sent, api, batch_id, group.model)

    def _track(self, sent: SentBatch, api: BatchAPI, batch_id: str, model: Any = None) -> None:
        if sent.id != batch_id:
            self.ledger.submitted(sent, batch_id)
        info = ProviderBatchInfo(
            id=batch_id,
            provider=api.provider,
            lines=len(sent.lines),
            status="in_progress",
            created=_stamp(sent.at) or datetime.now(timezone.utc),
        )
        self.summary.batches.append(info)
        self.summary.lines += len(sent.lines)
        out = _Out(sent, api, info, next_poll=time.monotonic() + self._period(), model=model)
        self._out[batch_id] = out
        self._watch(batch_id, out)
        for custom_id in sent.lines:
            if custom_id not in self._futures:  # a resumed job's line, not asked for yet
                self._out_lines.add(custom_id)
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())
        self._wake.set()
        self._changed()

    def _fail(self, ids: Sequence[str], where: str, error: ProviderError) -> None:
        for custom_id in ids:
            self._settle(custom_id, LineResult(custom_id, "errored", error=error), where)

    def _settle(self, custom_id: str, answer: bytes | LineResult, batch_id: str) -> None:
        self._out_lines.discard(custom_id)
        self._answered_count += 1
        future = self._futures.pop(custom_id, None)
        if future is not None and not future.done():
            future.set_result((answer, batch_id))
            if self.keep_answers:
                self._answered.setdefault(_item_of(custom_id), {})[custom_id] = (answer, batch_id)
        else:  # nobody waits yet (a resumed job): kept until its run asks
            self._results[custom_id] = (answer, batch_id)

    def ended(self, key: Any) -> None:
        """The item of `key` ended: the answers kept for it go."""
        if self._answered:
            self._answered.pop(line_token(self.job, key_token(key)), None)

    # -- polling --------------------------------------------------------------------

    def _period(self, failures: int = 0) -> float:
        base = self.options.poll_seconds * min(2.0**failures, MAX_BACKOFF)
        return base * random.uniform(0.9, 1.1)

    async def _poll(self) -> None:
        while self._out and not self._closed:
            due = min(out.next_poll for out in self._out.values())
            delay = due - time.monotonic()
            if delay > 0:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
                continue
            now = time.monotonic()
            for batch_id, out in list(self._out.items()):
                if out.next_poll <= now:
                    await self._poll_one(batch_id, out)

    async def _poll_one(self, batch_id: str, out: _Out) -> None:
        try:
            state = await out.api.state(batch_id)
            if state.ended:
                raw = b"" if state.failure is not None else await out.api.results(state)
        except ProviderError as exc:
            out.failures += 1
            wait = getattr(exc, "details", {}).get("retry_after")
            period = self._period(out.failures)
            out.next_poll = time.monotonic() + max(period, wait or 0.0)
            logger.warning("polling %s batch %s: %s", out.api.provider, batch_id, exc)
            return
        out.failures = 0
        out.info.status = state.status
        if not state.ended:
            # A late batch, cancelled, is watched closely: its end frees its lines.
            period = self._period() if not out.late else self._grace() / 8
            out.next_poll = time.monotonic() + period
            self._changed()
            return
        failure = state.failure
        self.ledger.ended(out.sent, state.status, raw, None if failure is None else str(failure))
        del self._out[batch_id]
        self._learn(out, state.status, failure is None)
        out.info.ended = _stamp(state.ended_at) or datetime.now(timezone.utc)
        self._route(out.sent, out.api, raw, failure, batch_id, out.model, out.late)
        self._changed()

    def _route(
        self,
        sent: SentBatch,
        api: BatchAPI,
        raw: bytes,
        failure: ProviderBatchError | None,
        batch_id: str,
        model: Any = None,
        late: bool = False,
    ) -> None:
        expected = set(sent.lines)
        unanswered = 0  # a late batch's lines it did not answer: they go online
        for custom_id, line in split_results(raw):
            if custom_id in expected:
                expected.discard(custom_id)
                if custom_id in self._moved:  # sent online at its cutoff: answered twice?
                    self._twice(custom_id, api, line, model)
                    continue
                if late and custom_id in self._futures:
                    with contextlib.suppress(Exception):
                        unanswered += api.read_line(line).outcome in ("expired", "cancelled")
                self._settle(custom_id, line, batch_id)
        if unanswered and self.routing is not None:
            self.routing.moved("late batch", unanswered)
        if self._moved:
            expected -= self._moved
            self._moved.difference_update(sent.lines)
        if expected:
            error = failure or ProviderBatchError(
                f"{api.provider} batch {batch_id} ended without a result for"
                f" {len(expected)} of its lines",
                provider=api.provider,
                batch_id=batch_id,
            )
            self._fail(sorted(expected), batch_id, error)

    # -- what the job's progress shows ------------------------------------------------

    def status(self) -> LinesStatus:
        """Where the job's lines are now."""
        polls = [out.next_poll for out in self._out.values()]
        return LinesStatus(
            out=tuple((batch_id, out.info.status) for batch_id, out in self._out.items()),
            ended=len(self.summary.batches) - len(self._out),
            sent=self.summary.lines,
            answered=self._answered_count,
            gathering=sum(len(group.ids) for group in self._groups.values()),
            next_poll=max(0.0, min(polls) - time.monotonic()) if polls else None,
        )

    def _changed(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception as exc:  # a progress bar must not cost a batch
                logger.warning("provider-batch progress: %r", exc)

    # -- a resumed job: the batches its ledger knows ----------------------------------

    async def _adopt(self, model: Any, api: BatchAPI) -> None:
        endpoint = (api.provider, model.base_url)
        adopted = self._adopted.get(endpoint)
        if adopted is None:
            adopted = self._adopted[endpoint] = asyncio.get_running_loop().create_future()
            try:
                await self._adopt_endpoint(endpoint, api)
            finally:
                adopted.set_result(None)
        elif not adopted.done():
            await asyncio.shield(adopted)

    async def _adopt_endpoint(self, endpoint: tuple[str, str], api: BatchAPI) -> None:
        for sent in list(self.ledger.batches.values()):
            if (sent.provider, sent.base_url) != endpoint:
                continue
            if sent.results is not None:  # ended before: read back, no request
                failure = None
                if sent.failure is not None:
                    failure = ProviderBatchError(sent.failure, provider=api.provider)
                self._route(sent, api, sent.results, failure, sent.id or sent.tag)
                continue
            batch_id = sent.id
            if batch_id is None:  # killed mid-submission: was it made?
                try:
                    batch_id = await api.find(sent.tag, sent.at, len(sent.lines))
                except ProviderError as exc:
                    logger.warning("looking for batch %s: %s", sent.tag, exc)
                if batch_id is None:
                    continue  # never made: its lines go out again when asked for
            self._track(sent, api, batch_id)

    # -- the end --------------------------------------------------------------------

    async def close(self, *, interrupted: bool) -> None:
        """Stop: on an interruption, cancel what is out (`cancel_on_interrupt`); the
        ledger keeps what was sent either way."""
        self._closed = True
        for group in self._groups.values():
            if group.timer is not None:
                group.timer.cancel()
        self._groups.clear()
        if interrupted and self.options.cancel_on_interrupt:
            for batch_id, out in list(self._out.items()):
                try:
                    await out.api.cancel(batch_id)
                    out.info.status = "cancelling"
                except ProviderError as exc:
                    logger.warning("cancelling %s batch %s: %s", out.api.provider, batch_id, exc)
        if not interrupted:
            await self._last_look()
        for task in [self._poller, *self._tasks]:
            if task is not None and not task.done():
                task.cancel()
        for future in self._futures.values():
            future.cancel()
        self.ledger.close()

    @property
    def runner_route(self) -> Any:
        """The route the Ray runners' attempts follow: the one the job started with
        (the driver's cutoffs follow what it learns since)."""
        return None if self.routing is None else self.routing.policy

    def note_online(self) -> None:
        self.summary.online_lines += 1

    def count(self, model: Any, response: ModelResponse) -> None:
        """Adds a line's reply to the job's cost, and what it would have cost online."""
        self.add_spend(spend_of(model, response))

    def add_spend(self, spend: LineCost) -> None:
        summary = self.summary
        if spend.cost is not None:
            summary.cost = (summary.cost or 0.0) + spend.cost
        if spend.online_cost is not None:
            summary.online_cost = (summary.online_cost or 0.0) + spend.online_cost
        summary.online_lines += spend.online_lines


def _least(api: BatchAPI) -> int:
    """The fewest lines a batch of `api` takes (most take one)."""
    return api.min_lines if isinstance(api, MinimumLines) else 1


def _item_of(custom_id: str) -> str:
    """The item part of a line's custom_id (see `trip_lines.line_token`)."""
    return custom_id.partition("-")[0]


def _refused(exc: ProviderError, provider: str, tag: str) -> ProviderError:
    if isinstance(exc, ProviderBatchError):
        return exc
    error = ProviderBatchError(
        f"{provider}: batch {tag} could not be submitted: {exc}",
        provider=provider,
        retryable=exc.retryable,
        status=exc.details.get("status"),
        provider_code=exc.details.get("provider_code"),
    )
    error.__cause__ = exc
    return error

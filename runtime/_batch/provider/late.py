"""A job with a deadline: its provider batches that are late (`LateBatches`, a part of
`LinePool`), and what the pool tells the job's route.

At a batch's cutoff (its route's: the deadline, less what answering its lines online
takes and the grace below) the batch is late: it is cancelled and watched closely; what
it answered before it ended is kept, the lines it did not answer go online. If it has
not ended after the grace (two polls), its lines go online anyway (their trips get a
`LateLine`), and any answer it still gives them was paid twice: counted, and priced.
Each batch's turnaround is told to the route, which learns from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from typing import Any, Protocol

from ...errors import ProviderError
from ...models.batch_api import BatchAPI, LineResult
from .options import ProviderBatch
from .trip_lines import Answer, LateLine, spend_of

__all__ = ["LateBatches", "RouteBook", "grace_of"]

logger = logging.getLogger(__name__)
_TRIP = re.compile(r"-t(\d+)-")  # a line's trip number, in its custom_id


class RouteBook(Protocol):
    """What the pool tells a job's route (`raygent._batch.routing.job.RouteJob`)."""

    @property
    def policy(self) -> Any: ...

    def batch_ended(self, seconds: float, ok: bool) -> None: ...

    def moved(self, why: str, lines: int = 1) -> None: ...

    def answered_twice(self, cost: float | None) -> None: ...


def grace_of(options: ProviderBatch) -> float:
    """How long a late batch is given to end once cancelled: two polls."""
    return 2 * options.poll_seconds


class _OutBatch(Protocol):
    """What a batch that is out holds, as this part of the pool reads it."""

    sent: Any
    api: BatchAPI
    info: Any
    model: Any
    cutoff: asyncio.TimerHandle | None
    late: bool
    next_poll: float


class LateBatches:
    """The late batches of a job with a deadline (see the module's docstring): a part of
    `LinePool`, which holds the state it reads and the ways to settle a line."""

    options: ProviderBatch
    routing: RouteBook | None
    _out: dict[str, Any]
    _futures: dict[str, asyncio.Future[Answer]]
    _moved: set[str]
    _wake: asyncio.Event

    def _settle(self, custom_id: str, answer: bytes | LineResult, batch_id: str) -> None:
        raise NotImplementedError

    def _spawn(self, work: Any) -> None:
        raise NotImplementedError

    def _changed(self) -> None:
        raise NotImplementedError

    def _grace(self) -> float:
        """How long a late batch is given to end once cancelled (its answers kept, the
        rest sent online), before its lines go online anyway (`grace_of`)."""
        return grace_of(self.options)

    def _watch(self, batch_id: str, out: _OutBatch) -> None:
        """With a route, a timer at the batch's cutoff (the route leaves the grace its
        cancel is given after it): the cutoff of its earliest trip (the one with the
        most trips left, which needs the most time online)."""
        route = self.routing
        if route is None:
            return
        trips = [int(m.group(1)) for c in out.sent.lines if (m := _TRIP.search(c))]
        cutoff = route.policy.cutoff(min(trips, default=0))
        if cutoff is None:
            return
        delay = max(0.0, cutoff - time.time())
        out.cutoff = asyncio.get_running_loop().call_later(delay, self._late, batch_id)

    def _late(self, batch_id: str) -> None:
        """The batch is late for the deadline: it is cancelled, and polled until it
        ends (what it answered is kept, the lines it did not go online); if it has not
        ended after the grace, its lines go online anyway (`_move`)."""
        out = self._out.get(batch_id)
        route = self.routing
        if out is None or route is None:
            return
        out.late = True
        route.batch_ended(time.time() - out.sent.at, False)  # it took at least this long
        self._spawn(self._cancel(batch_id, out))
        out.cutoff = asyncio.get_running_loop().call_later(self._grace(), self._move, batch_id)
        self._changed()

    def _move(self, batch_id: str) -> None:
        """A late batch still not ended: the lines waited for go online now (any answer
        its batch still gives them was paid twice, and is counted)."""
        out = self._out.get(batch_id)
        route = self.routing
        if out is None or route is None:
            return
        moved = 0
        for custom_id in out.sent.lines:
            future = self._futures.get(custom_id)
            if future is None or future.done():
                continue
            error = LateLine(
                f"{out.api.provider} batch {batch_id} is late for the deadline: line"
                f" {custom_id} goes online",
                provider=out.api.provider,
                batch_id=batch_id,
            )
            self._moved.add(custom_id)
            self._settle(custom_id, LineResult(custom_id, "cancelled", error=error), batch_id)
            moved += 1
        if moved:
            route.moved("late batch", moved)
        self._changed()

    async def _last_look(self) -> None:
        """At the job's end, its late batches still ending are watched until they end,
        at most until the deadline (a job may take that long), so that what they
        answered of the lines sent online is counted as paid twice (one still ending
        then is left: what it answers later is not seen)."""
        route = self.routing
        until = 0.0 if route is None else route.policy.deadline
        while True:
            late = [(b, out) for b, out in self._out.items() if out.late]
            for batch_id, out in late:
                if out.cutoff is not None:
                    out.cutoff.cancel()
                    out.cutoff = None
                await self._poll_one(batch_id, out)
            if not any(out.late for out in self._out.values()) or time.time() >= until:
                return
            await asyncio.sleep(self._grace() / 8)

    async def _poll_one(self, batch_id: str, out: Any) -> None:
        raise NotImplementedError

    async def _cancel(self, batch_id: str, out: _OutBatch) -> None:
        try:
            await out.api.cancel(batch_id)
            out.info.status = "cancelling"
        except ProviderError as exc:  # it goes on: its answers are counted when it ends
            logger.warning("cancelling late %s batch %s: %s", out.api.provider, batch_id, exc)
        out.next_poll = time.monotonic()  # see it end soon
        self._wake.set()

    def _learn(self, out: _OutBatch, status: str, whole: bool) -> None:
        if out.cutoff is not None:
            out.cutoff.cancel()
        route = self.routing
        if route is None or out.late:
            return
        answered = whole and status not in ("expired", "cancelled", "canceled")
        route.batch_ended(time.time() - out.sent.at, answered)

    def _twice(self, custom_id: str, api: BatchAPI, line: bytes, model: Any) -> None:
        """A moved line's answer from its batch: paid twice if it succeeded."""
        self._moved.discard(custom_id)
        route = self.routing
        if route is None:
            return
        try:
            result = api.read_line(line)
        except Exception:  # an unreadable line was not billed as an answer
            return
        if result.outcome != "succeeded":
            return
        cost: float | None = None
        if model is not None and result.body is not None:
            with contextlib.suppress(Exception):
                cost = spend_of(model, model.batch_reply(result.body)).cost
        route.answered_twice(cost)

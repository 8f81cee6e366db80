"""What the batch APIs share: the HTTP call bookkeeping (auth, stats), the scripted
processing clock (each batch's time drawn by `BatchTimer` from the provider's
`BatchTimes`), and the line runner that cancellation and expiry can cut short."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from aiohttp import web

from ._batch_times import BatchTimes
from ._stats import RecordedRequest, redact_headers
from ._types import Wire

if TYPE_CHECKING:
    from ._config import SimConfig
    from ._stats import StatsRecorder

BatchHandler = Callable[[web.Request, str], Awaitable[web.Response]]


@dataclass(frozen=True, slots=True)
class JsonAnswer:
    """An online endpoint's answer to one request: HTTP status and JSON body (``None``
    when a transport fault means there is no JSON answer) and the request id."""

    status: int
    body: bytes | None
    request_id: str


class Core(Protocol):
    """What the batch APIs use of the simulator's core (`_server.SimCore`)."""

    config: SimConfig
    stats: StatsRecorder

    def next_request_id(self) -> str: ...

    def answer_json(self, wire: Wire, body: object) -> JsonAnswer: ...


@dataclass(frozen=True, slots=True)
class Timing:
    """How one batch is processed: ``seconds`` spread evenly over its lines (a line is
    answered at ``start + seconds * (i + 1) / n``); after ``expire_after`` answered
    lines the batch expires and the rest are not answered. ``stall``: no line is ever
    answered (until the batch is cancelled or its window passes). ``window``: seconds
    after its start at which a batch still running expires (None: never)."""

    seconds: float = 0.0
    expire_after: int | None = None
    stall: bool = False
    window: float | None = None
    cancel_seconds: float = 0.0  # how long a cancel takes to stop the answering


@dataclass
class BatchTimer:
    """Draws each new batch's `Timing`: from its provider's `BatchTimes` when it has
    some (one seeded draw sequence per provider, so one provider's batches never move
    another's draws), else the fixed ``default``."""

    default: Timing
    times: Mapping[str, BatchTimes] = field(default_factory=dict)
    _rngs: dict[str, random.Random] = field(init=False, default_factory=dict)

    def reset(self) -> None:
        self._rngs.clear()

    def draw(self, provider: str) -> Timing:
        times = self.times.get(provider)
        if times is None:
            return self.default
        rng = self._rngs.get(provider)
        if rng is None:
            rng = self._rngs[provider] = random.Random(f"{times.seed}:{provider}")
        # Both draws are made for every batch: the sequence stays seeded whatever is set.
        stall = rng.random() < times.stall_rate
        seconds = times.median_seconds * math.exp(times.spread * rng.gauss(0.0, 1.0))
        expire_after, window = self.default.expire_after, times.window_seconds
        return Timing(seconds, expire_after, stall, window, times.cancel_seconds)


def now() -> int:
    return int(time.time())


class BatchCalls:
    """Wraps the batch API handlers: records the call (as ``api``), checks the key,
    counts the finished status."""

    def __init__(self, core: Core, wire: Wire, api: str) -> None:
        self.core = core
        self.wire = wire
        self.api = api

    def handler(self, run: BatchHandler) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            rid = self.core.next_request_id()
            headers = redact_headers(request.headers)
            record = RecordedRequest(self.api, request.method, request.path, headers, None)
            self.core.stats.received(record, batch_call=True)
            key = self.core.config.api_key
            if key is not None and self.wire.api_key(request.headers) != key:
                resp = self.error(401, None, rid)
            else:
                resp = await run(request, rid)
            resp.headers[self.wire.request_id_header] = rid
            self.core.stats.finished(resp.status)
            return resp

        return handle

    def error(
        self,
        status: int,
        message: str | None,
        rid: str,
        *,
        code: str | None = None,
        param: str | None = None,
    ) -> web.Response:
        body = self.wire.error(status, message, request_id=rid, code=code, param=param)
        return web.Response(status=status, body=body, content_type="application/json")


def json_response(body: bytes) -> web.Response:
    return web.Response(status=200, body=body, content_type="application/json")


LineTurn = Literal["answer", "expired", "cancelled"]


class LineClock:
    """Paces a batch's lines over its `Timing`; :meth:`cancel` wakes it at once."""

    def __init__(self, timing: Timing, lines: int) -> None:
        self.timing = timing
        self.lines = max(lines, 1)
        self.start = time.monotonic()
        self.cancelled = asyncio.Event()
        self.timed_out = False  # the window passed: the rest expire
        self._cancelling: asyncio.TimerHandle | None = None

    def cancel(self) -> None:
        """Stop answering lines: at once, or after the timing's `cancel_seconds`."""
        if self.cancelled.is_set() or self._cancelling is not None:
            return
        delay = self.timing.cancel_seconds
        if delay <= 0:
            self.cancelled.set()
            return
        self._cancelling = asyncio.get_running_loop().call_later(delay, self.cancelled.set)

    def expired(self, answered: int) -> bool:
        limit = self.timing.expire_after
        return self.timed_out or (limit is not None and answered >= limit)

    async def next_line(self, index: int) -> LineTurn:
        """Wait for line `index`'s turn: "answer" it, or the batch "expired" (past
        ``expire_after`` lines, or its window) or was "cancelled" meanwhile."""
        if self.expired(index):
            return "expired"
        timing = self.timing
        due = math.inf if timing.stall else self.start + timing.seconds * (index + 1) / self.lines
        end = math.inf if timing.window is None else self.start + timing.window
        if self.cancelled.is_set():
            return "cancelled"
        wake = min(due, end)
        if math.isinf(wake):
            await self.cancelled.wait()
        elif (delay := wake - time.monotonic()) > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.cancelled.wait(), delay)
        if self.cancelled.is_set():
            return "cancelled"
        if due > end:
            self.timed_out = True
            return "expired"
        return "answer"


def page(items: list[dict[str, object]], limit: int) -> tuple[list[dict[str, object]], bool]:
    return items[:limit], len(items) > limit


def parse_limit(request: web.Request, default: int, maximum: int) -> int | None:
    raw = request.query.get("limit")
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if 1 <= value <= maximum else None

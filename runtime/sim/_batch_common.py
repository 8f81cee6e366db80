"""What the batch APIs share: the HTTP call bookkeeping (auth, stats), the scripted
processing clock, and the line runner that cancellation and expiry can cut short."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from aiohttp import web

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
    """How a batch is processed: ``seconds`` spread evenly over its lines (a line is
    answered at ``start + seconds * (i + 1) / n``); after ``expire_after`` answered
    lines the batch expires and the rest are not answered."""

    seconds: float = 0.0
    expire_after: int | None = None


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


class LineClock:
    """Paces a batch's lines over ``Timing.seconds``; :meth:`cancel` wakes it at once."""

    def __init__(self, timing: Timing, lines: int) -> None:
        self.timing = timing
        self.lines = max(lines, 1)
        self.start = time.monotonic()
        self.cancelled = asyncio.Event()

    def cancel(self) -> None:
        self.cancelled.set()

    def expired(self, answered: int) -> bool:
        limit = self.timing.expire_after
        return limit is not None and answered >= limit

    async def wait_line(self, index: int) -> bool:
        """Wait for line `index`'s turn; False if the batch was cancelled meanwhile."""
        due = self.start + self.timing.seconds * (index + 1) / self.lines
        delay = due - time.monotonic()
        if self.cancelled.is_set():
            return False
        if delay > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.cancelled.wait(), delay)
        return not self.cancelled.is_set()


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

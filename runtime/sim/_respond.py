"""Sending answers: JSON bodies, SSE streams with per-token pacing, and the transport
faults (hang, truncate) that end an exchange without a proper response."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from aiohttp import web
from pydantic_core import to_json

from ._rates import Admission
from ._script import Fault
from ._types import ParsedRequest, Plan, SSEStream, Wire

_SSE_HEADERS = {"Cache-Control": "no-cache"}
_FOREVER = 24 * 3600.0


class Exchange:
    """One request/response in progress and how it ended."""

    __slots__ = (
        "admission",
        "admitted",
        "client_gone",
        "dropped",
        "per_token",
        "rate_headers",
        "request",
        "request_id",
        "status",
        "ttfb",
        "wire",
    )

    def __init__(self, request: web.Request, wire: Wire, request_id: str) -> None:
        self.request = request
        self.wire = wire
        self.request_id = request_id
        self.admitted = False  # counted in flight (released when the exchange ends)
        self.dropped = False  # the simulator cut the connection on purpose
        self.client_gone = False  # a write failed: the client went away
        self.status = 200
        self.ttfb = 0.0
        self.per_token = 0.0
        self.admission: Admission | None = None  # its rate-limit charges, to settle
        self.rate_headers: dict[str, str] = {}  # sent on every reply, errors included

    def headers(
        self, retry_after: float | None = None, extra: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        headers = {self.wire.request_id_header: self.request_id, **self.rate_headers}
        if retry_after is not None:
            headers["Retry-After"] = f"{retry_after:g}"
        if extra:
            headers.update(extra)
        return headers

    def response(
        self,
        status: int,
        body: bytes,
        *,
        content_type: str = "application/json",
        retry_after: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> web.Response:
        return web.Response(
            status=status,
            body=body,
            content_type=content_type,
            headers=self.headers(retry_after, headers),
        )

    async def sleep(self, seconds: float) -> None:
        if seconds > 0:
            await asyncio.sleep(seconds)

    async def hang(self) -> None:
        """Wait until the client disconnects or the server shuts down (both cancel)."""
        await asyncio.sleep(_FOREVER)

    async def drop(self, status: int) -> None:
        """Close the connection mid-response; the connection loss then cancels us."""
        self.dropped = True
        self.status = status
        transport = self.request.transport
        if transport is not None:
            transport.close()
        await asyncio.sleep(_FOREVER)


def fault_body(fault: Fault, ex: Exchange) -> bytes:
    """The error body of a ``status`` or ``stream_error`` fault: the scripted ``body``
    verbatim, else the provider's own error."""
    if fault.body is None:
        return ex.wire.error(fault.status, fault.message, request_id=ex.request_id)
    return verbatim(fault.body)


def verbatim(body: dict[str, object] | str) -> bytes:
    return body.encode() if isinstance(body, str) else to_json(body)


async def respond_plan(
    ex: Exchange, req: ParsedRequest, plan: Plan, fault: Fault | None, id_suffix: str
) -> web.StreamResponse:
    """Answer with ``plan`` as a JSON body or an SSE stream, applying latency and the
    transport faults."""
    response_id = ex.wire.response_id_prefix + id_suffix
    kind = fault.kind if fault is not None else None
    if not req.stream:
        body = ex.wire.body(plan, req, response_id)
        await ex.sleep(ex.ttfb + ex.per_token * plan.output_tokens)
        if kind == "hang":
            await ex.hang()
        if kind == "truncate":
            return await _truncated_body(ex, body)
        return ex.response(200, body)
    sse = ex.wire.stream(plan, req, response_id)
    await ex.sleep(ex.ttfb)
    stop = len(sse.events)
    if fault is not None and kind in ("hang", "truncate", "stream_error"):
        if kind == "hang" and fault.after_chunks == 0:
            await ex.hang()
        stop = min(fault.after_chunks, sse.body_end)
    extra = fault.headers if fault is not None else None
    headers = {"Content-Type": sse.content_type, **_SSE_HEADERS, **ex.headers(extra=extra)}
    resp = web.StreamResponse(status=200, headers=headers)
    await resp.prepare(ex.request)
    try:
        await _write_events(resp, sse, stop, ex.per_token)
        if kind == "hang":
            await ex.hang()
        if kind == "truncate":
            await ex.drop(200)
        if fault is not None and kind == "stream_error":
            await resp.write(ex.wire.stream_error(fault_body(fault, ex)))
        await resp.write_eof()
    except ConnectionError:
        ex.client_gone = True
    return resp


async def _write_events(
    resp: web.StreamResponse, sse: SSEStream, stop: int, per_token: float
) -> None:
    if per_token <= 0:
        # No pacing: one write is much cheaper and the client still sees every event.
        await resp.write(b"".join(sse.events[:stop]))
        return
    for event, tokens in zip(sse.events[:stop], sse.tokens[:stop], strict=True):
        if tokens:
            await asyncio.sleep(per_token * tokens)
        await resp.write(event)


async def _truncated_body(ex: Exchange, body: bytes) -> web.StreamResponse:
    """Promise the whole body, send half of it, cut the connection."""
    resp = web.StreamResponse(status=200, headers=ex.headers())
    resp.content_type = "application/json"
    resp.content_length = len(body)
    await resp.prepare(ex.request)
    await resp.write(body[: len(body) // 2])
    await ex.drop(200)
    return resp

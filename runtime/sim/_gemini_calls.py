"""What the Gemini resource APIs (cached contents, files, batches) share: the call's
bookkeeping (stats, the key by header, query or Bearer token), Google's error bodies,
timestamps and page tokens."""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

from aiohttp import web
from pydantic_core import from_json, to_json

from ._batch_common import Core
from ._gemini_errors import error_body
from ._gemini_wire import GeminiWire
from ._stats import RecordedRequest, redact_headers

Handler = Callable[[web.Request, str], Awaitable[web.Response]]
# The Gemini API's versions (the docs name v1beta; the SDK asks for v1 by default).
# `/v1/files` and `/v1/batches` are OpenAI's here: on the Gemini API they are v1beta's.
VERSIONS = ("v1beta", "v1")


def stamp(moment: datetime) -> str:
    """RFC 3339 in UTC with nanosecond-style digits, as Google's APIs write times."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def json_reply(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status, body=to_json(obj), content_type="application/json", headers=headers
    )


def error_reply(status: int, message: str | None = None) -> web.Response:
    return web.Response(
        status=status, body=error_body(status, message), content_type="application/json"
    )


async def read_json(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return from_json(raw) if raw else {}
    except ValueError:
        return None


def vertex_path(request: web.Request) -> bool:
    return "/projects/" in request.path


class Calls:
    """Wraps a resource API's handlers: records the call (as `api`), checks the key
    (``x-goog-api-key``, ``?key=`` or, on Vertex AI, a Bearer token), counts the status."""

    def __init__(self, core: Core, api: str, *, batch_call: bool, bearer: bool = False) -> None:
        self.core = core
        self.api = api
        self.batch_call = batch_call
        self.bearer = bearer  # OAuth tokens too (Cloud Storage), not only Vertex AI paths
        self._ids = itertools.count(1)

    def new_id(self) -> str:
        """A resource id: a counter (ordered) and random letters (never guessed)."""
        return f"{next(self._ids):06d}{secrets.token_hex(5)}"

    def handler(self, run: Handler) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            rid = self.core.next_request_id()
            headers = redact_headers(request.headers)
            record = RecordedRequest(self.api, request.method, request.path, headers, None)
            self.core.stats.received(record, batch_call=self.batch_call)
            key = self.core.config.api_key
            vertex = self.bearer or vertex_path(request)
            wire = GeminiWire("", vertex=vertex, query_key=request.query.get("key"))
            # An upload's chunks go to its session URL, whose id is the credential.
            session = "upload_id" in request.query
            if key is not None and not session and wire.api_key(request.headers) != key:
                body = wire.error(401, None, request_id=rid)
                resp = web.Response(status=401, body=body, content_type="application/json")
            else:
                resp = await run(request, rid)
            resp.headers[wire.request_id_header] = rid
            self.core.stats.finished(resp.status)
            return resp

        return handle


def page_size(request: web.Request, default: int, maximum: int) -> int | None:
    raw = request.query.get("pageSize")
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        return None
    return min(value, maximum) if value > 0 else default


def paged(items: list[dict[str, Any]], request: web.Request, key: str, size: int) -> dict[str, Any]:
    """A page of `items` under `key`, from ``pageToken`` (an offset), with the token of
    the next page when there is one."""
    token = request.query.get("pageToken") or "0"
    start = int(token) if token.isdigit() else 0
    out: dict[str, Any] = {key: items[start : start + size]}
    if start + size < len(items):
        out["nextPageToken"] = str(start + size)
    return out

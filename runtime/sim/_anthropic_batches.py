"""Anthropic Message Batches: requests answered one by one by the scripted rules (as
``POST /v1/messages`` would answer them, unstreamed), results as JSONL."""

from __future__ import annotations

import asyncio
import itertools
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from aiohttp import web
from pydantic_core import from_json, to_json

from ._batch_common import (
    BatchCalls,
    BatchTimer,
    Core,
    LineClock,
    Timing,
    json_response,
    parse_limit,
)
from ._types import Wire

_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_NO_JSON = {"type": "api_error", "message": "Internal server error"}


def _stamp(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


@dataclass(slots=True)
class _MessageBatch:
    id: str
    requests: list[dict[str, Any]]
    created_at: datetime
    timing: Timing
    status: str = "in_progress"
    cancel_initiated_at: datetime | None = None
    ended_at: datetime | None = None
    results_url: str | None = None
    results: list[bytes] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    clock: LineClock | None = None
    task: asyncio.Task[None] | None = None

    def obj(self) -> dict[str, Any]:
        counts = {k: self.counts.get(k, 0) for k in ("succeeded", "errored", "canceled", "expired")}
        done = sum(counts.values())
        return {
            "id": self.id,
            "type": "message_batch",
            "processing_status": self.status,
            "request_counts": {"processing": len(self.requests) - done, **counts},
            "ended_at": _stamp(self.ended_at),
            "created_at": _stamp(self.created_at),
            "expires_at": _stamp(self.created_at + timedelta(hours=24)),
            "archived_at": None,
            "cancel_initiated_at": _stamp(self.cancel_initiated_at),
            "results_url": self.results_url,
        }


class AnthropicBatches:
    """``/v1/messages/batches``: each request's ``params`` answered by
    :meth:`SimCore.answer_json` with the Messages wire, paced and expired by the
    server's :class:`Timing`."""

    def __init__(self, core: Core, wire: Wire, timing: BatchTimer) -> None:
        self.core = core
        self.wire = wire
        self.timing = timing
        self.calls = BatchCalls(core, wire, "anthropic_batch")
        self.batches: dict[str, _MessageBatch] = {}
        self._ids = itertools.count(1)

    def add_routes(self, app: web.Application) -> None:
        h = self.calls.handler
        app.router.add_post("/v1/messages/batches", h(self._create))
        app.router.add_get("/v1/messages/batches", h(self._list))
        app.router.add_get("/v1/messages/batches/{id}", h(self._get))
        app.router.add_delete("/v1/messages/batches/{id}", h(self._delete))
        app.router.add_post("/v1/messages/batches/{id}/cancel", h(self._cancel))
        app.router.add_get("/v1/messages/batches/{id}/results", h(self._results))

    def cancel_all(self) -> None:
        for batch in self.batches.values():
            if batch.task is not None:
                batch.task.cancel()

    async def _create(self, request: web.Request, rid: str) -> web.Response:
        try:
            body = from_json(await request.read())
        except ValueError:
            body = None
        if not isinstance(body, dict):
            message = "There was an error parsing the body of your request as JSON."
            return self.calls.error(400, message, rid)
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            return self.calls.error(400, "requests: Field required, at least 1 item", rid)
        seen: set[str] = set()
        for index, item in enumerate(requests):
            custom_id = item.get("custom_id") if isinstance(item, dict) else None
            where = f"requests.{index}"
            if not isinstance(custom_id, str) or not _CUSTOM_ID.match(custom_id):
                message = f"{where}.custom_id: must match ^[a-zA-Z0-9_-]{{1,64}}$"
                return self.calls.error(400, message, rid)
            if custom_id in seen:
                message = f"{where}: Duplicate custom_id '{custom_id}' in batch requests."
                return self.calls.error(400, message, rid)
            seen.add(custom_id)
            if not isinstance(item.get("params"), dict):
                return self.calls.error(400, f"{where}.params: Field required", rid)
        batch = _MessageBatch(
            f"msgbatch_sim{next(self._ids):024x}",
            requests,
            datetime.now(timezone.utc),
            self.timing.draw("anthropic"),
        )
        self.batches[batch.id] = batch
        batch.task = asyncio.get_running_loop().create_task(self._run(batch, _origin(request)))
        return json_response(to_json(batch.obj()))

    def _batch(self, request: web.Request) -> _MessageBatch | None:
        return self.batches.get(request.match_info["id"])

    def _not_found(self, rid: str) -> web.Response:
        return self.calls.error(404, "Not found", rid)

    async def _get(self, request: web.Request, rid: str) -> web.Response:
        batch = self._batch(request)
        return self._not_found(rid) if batch is None else json_response(to_json(batch.obj()))

    async def _list(self, request: web.Request, rid: str) -> web.Response:
        limit = parse_limit(request, 20, 1000)
        if limit is None:
            return self.calls.error(400, "limit: must be between 1 and 1000", rid)
        items = [b.obj() for b in reversed(self.batches.values())]
        ids = [item["id"] for item in items]
        after, before = request.query.get("after_id"), request.query.get("before_id")
        if after is not None:
            items = items[ids.index(after) + 1 :] if after in ids else []
            data = items[:limit]
        elif before is not None:
            items = items[: ids.index(before)] if before in ids else []
            data = items[-limit:]
        else:
            data = items[:limit]
        body = {
            "data": data,
            "has_more": len(items) > limit,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }
        return json_response(to_json(body))

    async def _cancel(self, request: web.Request, rid: str) -> web.Response:
        batch = self._batch(request)
        if batch is None:
            return self._not_found(rid)
        if batch.status == "in_progress":
            batch.status = "canceling"
            batch.cancel_initiated_at = datetime.now(timezone.utc)
            if batch.clock is not None:
                batch.clock.cancel()
        return json_response(to_json(batch.obj()))

    async def _delete(self, request: web.Request, rid: str) -> web.Response:
        batch = self._batch(request)
        if batch is None:
            return self._not_found(rid)
        if batch.status != "ended":
            message = f"Batch {batch.id} cannot be deleted while it is {batch.status}."
            return self.calls.error(400, message, rid)
        del self.batches[batch.id]
        return json_response(to_json({"id": batch.id, "type": "message_batch_deleted"}))

    async def _results(self, request: web.Request, rid: str) -> web.Response:
        batch = self._batch(request)
        if batch is None:
            return self._not_found(rid)
        if batch.status != "ended":
            message = f"Batch {batch.id} has not ended; its results are not available yet."
            return self.calls.error(400, message, rid)
        content = b"".join(line + b"\n" for line in batch.results)
        return web.Response(body=content, content_type="application/x-jsonl")

    async def _run(self, batch: _MessageBatch, origin: str) -> None:
        """in_progress -> (canceling ->) ended; results in request order."""
        clock = batch.clock = LineClock(batch.timing, len(batch.requests))
        for index, item in enumerate(batch.requests):
            custom_id = item["custom_id"]
            turn = await clock.next_line(index)
            if turn != "answer":
                kind = "expired" if turn == "expired" else "canceled"
                self._result(batch, custom_id, {"type": kind})
                continue
            answer = self.core.answer_json(self.wire, item["params"])
            self.core.stats.batch_line()
            if answer.status == 200 and answer.body is not None:
                result = {"type": "succeeded", "message": from_json(answer.body)}
            else:
                error = _error_body(answer.body, answer.request_id)
                result = {"type": "errored", "error": error}
            self._result(batch, custom_id, result)
        batch.status = "ended"
        batch.ended_at = datetime.now(timezone.utc)
        batch.results_url = f"{origin}/v1/messages/batches/{batch.id}/results"

    def _result(self, batch: _MessageBatch, custom_id: str, result: dict[str, Any]) -> None:
        kind = result["type"]
        batch.counts[kind] = batch.counts.get(kind, 0) + 1
        batch.results.append(to_json({"custom_id": custom_id, "result": result}))


def _error_body(body: bytes | None, request_id: str) -> dict[str, Any]:
    """The errored result's ``error``: the Messages error body (an ErrorResponse)."""
    if body is not None:
        try:
            parsed = from_json(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("type") == "error":
            return parsed
    return {"type": "error", "error": _NO_JSON, "request_id": request_id}


def _origin(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"

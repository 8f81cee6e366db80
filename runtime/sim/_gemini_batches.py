"""Gemini API batch mode: ``models/{model}:batchGenerateContent`` with inline requests
(each with its ``metadata.key``) or a JSONL file uploaded through the Files API (lines
``{"key", "request"}``); each request answered as ``generateContent`` would answer it
unstreamed, paced by the simulator's batch timing; results in input order with their
keys, inline or in a generated responses file; ``batches/{id}`` got, listed, cancelled
and deleted as long-running operations. The per-model enqueued-token quota refuses a
batch with 429 ``RESOURCE_EXHAUSTED`` (no ``Retry-After``, no ``RetryInfo``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiohttp import web
from pydantic_core import from_json, to_json

from ._batch_common import BatchTimer, Core, LineClock
from ._gemini_calls import (
    Calls,
    error_reply,
    json_reply,
    page_size,
    paged,
    stamp,
    utcnow,
)
from ._gemini_errors import error_body
from ._gemini_files import GeminiFiles
from ._gemini_request import get, model_id
from ._gemini_wire import GeminiWire
from ._tokens import count_tokens
from ._types import WireError

MAX_INLINE_BYTES = 20 * 1024 * 1024
_TYPE = "type.googleapis.com/google.ai.generativelanguage.v1main."
_DONE = (
    "BATCH_STATE_SUCCEEDED",
    "BATCH_STATE_FAILED",
    "BATCH_STATE_CANCELLED",
    "BATCH_STATE_EXPIRED",
)


@dataclass(slots=True)
class _Line:
    key: str | None
    request: dict[str, Any]
    tokens: int
    metadata: Any = None


@dataclass(slots=True)
class _Batch:
    name: str
    model: str
    display_name: str
    lines: list[_Line]
    from_file: str | None
    created: datetime
    state: str = "BATCH_STATE_PENDING"
    updated: datetime | None = None
    ended: datetime | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    succeeded: int = 0
    failed: int = 0
    output: dict[str, Any] | None = None
    clock: LineClock | None = None
    task: asyncio.Task[None] | None = None
    cancel_asked: bool = False

    @property
    def enqueued(self) -> int:
        """Tokens of the lines not answered yet (what the enqueued quota counts)."""
        if self.state in _DONE:
            return 0
        return sum(line.tokens for line in self.lines[len(self.results) :])

    def metadata(self) -> dict[str, Any]:
        answered = self.succeeded + self.failed
        stats = {
            "requestCount": str(len(self.lines)),
            "successfulRequestCount": str(self.succeeded),
            "failedRequestCount": str(self.failed),
            "pendingRequestCount": str(
                len(self.lines) - answered if self.state not in _DONE else 0
            ),
        }
        out: dict[str, Any] = {
            "@type": _TYPE + "GenerateContentBatch",
            "model": f"models/{self.model}",
            "displayName": self.display_name,
            "createTime": stamp(self.created),
            "updateTime": stamp(self.updated or self.created),
            "batchStats": {k: v for k, v in stats.items() if v != "0"},
            "state": self.state,
            "name": self.name,
        }
        if self.ended is not None:
            out["endTime"] = stamp(self.ended)
        if self.output is not None:
            out["output"] = self.output
        return out

    def operation(self) -> dict[str, Any]:
        op: dict[str, Any] = {"name": self.name, "metadata": self.metadata()}
        if self.state in _DONE:
            op["done"] = True
            if self.output is not None:
                op["response"] = {"@type": _TYPE + "GenerateContentBatchOutput", **self.output}
        return op


class GeminiBatches:
    """The batch routes, the Files API they read and write, and the line runner."""

    def __init__(
        self, core: Core, files: GeminiFiles, timing: BatchTimer, enqueued_limit: int | None
    ):
        self.core = core
        self.files = files
        self.timing = timing
        self.enqueued_limit = enqueued_limit
        self.calls = Calls(core, "gemini_batch", batch_call=True)
        self.batches: dict[str, _Batch] = {}

    def add_routes(self, app: web.Application) -> None:
        h = self.calls.handler
        app.router.add_get("/v1beta/batches", h(self._list))
        app.router.add_get("/v1beta/batches/{id}", h(self._get))
        app.router.add_post("/v1beta/batches/{id}", h(self._cancel))  # {id}:cancel
        app.router.add_delete("/v1beta/batches/{id}", h(self._delete))

    def create_handler(self) -> Callable[[web.Request], Awaitable[web.Response]]:
        return self.calls.handler(self._create)

    def cancel_all(self) -> None:
        for batch in self.batches.values():
            if batch.task is not None:
                batch.task.cancel()

    async def _create(self, request: web.Request, rid: str) -> web.Response:
        model = model_id(request.match_info["call"].rsplit(":", 1)[0])
        raw = await request.read()
        try:
            body = from_json(raw) if raw else None
        except ValueError:
            body = None
        batch_body = get(body, "batch") if isinstance(body, dict) else None
        if not isinstance(batch_body, dict):
            return error_reply(400, "* BatchGenerateContentRequest.batch: batch is required")
        config = get(batch_body, "inputConfig")
        if not isinstance(config, dict):
            return error_reply(400, "* BatchGenerateContentRequest.batch.input_config: required")
        try:
            lines, from_file = self._lines(config, model, len(raw))
        except WireError as exc:
            return error_reply(exc.status, exc.message)
        wanted = sum(line.tokens for line in lines)
        limit = self.enqueued_limit
        if limit is not None:
            enqueued = sum(b.enqueued for b in self.batches.values() if b.model == model)
            if enqueued + wanted > limit:
                return _enqueued_refusal(model, limit, enqueued, wanted)
        name = f"batches/{self.calls.new_id()}"
        display = get(batch_body, "displayName")
        batch = _Batch(name, model, str(display or name), lines, from_file, utcnow())
        self.batches[name] = batch
        origin = f"{request.scheme}://{request.host}"
        batch.task = asyncio.get_running_loop().create_task(self._run(batch, origin))
        return json_reply(batch.operation())

    def _lines(
        self, config: dict[str, Any], model: str, size: int
    ) -> tuple[list[_Line], str | None]:
        requests = get(config, "requests")
        file_name = get(config, "fileName")
        if (requests is None) == (file_name is None):
            raise WireError("input_config must set exactly one of requests and file_name.")
        if requests is not None:
            if size > MAX_INLINE_BYTES:
                raise WireError(
                    f"Request payload size exceeds the limit: {MAX_INLINE_BYTES} bytes."
                )
            items = get(requests, "requests") if isinstance(requests, dict) else None
            if not isinstance(items, list) or not items:
                raise WireError("* BatchGenerateContentRequest.batch.input_config.requests: empty")
            return [self._line(item, model, i) for i, item in enumerate(items)], None
        file = self.files.files.get(str(file_name))
        if file is None:
            raise WireError(f"File {file_name} not found.", status=404)
        lines = []
        for number, raw in enumerate(file.content.splitlines()):
            if not raw.strip():
                continue
            try:
                item = from_json(raw)
            except ValueError:
                raise WireError(f"Line {number + 1} of {file_name} is not valid JSON.") from None
            lines.append(self._line(item, model, number))
        if not lines:
            raise WireError(f"The input file {file_name} has no requests.")
        return lines, str(file_name)

    def _line(self, item: object, model: str, index: int) -> _Line:
        request = get(item, "request") if isinstance(item, dict) else None
        if not isinstance(request, dict):
            raise WireError(f"Request {index}: a request object is required.")
        metadata = get(item, "metadata") if isinstance(item, dict) else None
        key = get(item, "key") if isinstance(item, dict) else None
        if key is None and isinstance(metadata, dict):
            key = metadata.get("key")
        try:
            tokens = GeminiWire(model).parse(request).input_tokens
        except WireError:
            tokens = count_tokens(to_json(request).decode())
        return _Line(None if key is None else str(key), request, tokens, metadata)

    def _batch(self, request: web.Request) -> tuple[_Batch | None, str]:
        raw = request.match_info["id"]
        action = raw.rsplit(":", 1)[1] if ":" in raw else ""
        return self.batches.get("batches/" + raw.split(":", 1)[0]), action

    async def _get(self, request: web.Request, rid: str) -> web.Response:
        batch, _ = self._batch(request)
        if batch is None:
            return error_reply(404, f"Batch {request.match_info['id']} not found.")
        return json_reply(batch.operation())

    async def _list(self, request: web.Request, rid: str) -> web.Response:
        size = page_size(request, 50, 1000)
        if size is None:
            return error_reply(400, "Invalid value at 'page_size' (TYPE_INT32)")
        items = [b.operation() for b in reversed(self.batches.values())]
        return json_reply(paged(items, request, "operations", size) if items else {})

    async def _cancel(self, request: web.Request, rid: str) -> web.Response:
        batch, action = self._batch(request)
        if action != "cancel":
            return error_reply(404, f"Unknown method: {action or 'POST'}.")
        if batch is None:
            return error_reply(404, f"Batch {request.match_info['id']} not found.")
        batch.cancel_asked = True
        if batch.state not in _DONE and batch.clock is not None:
            batch.clock.cancel()
        return json_reply({})

    async def _delete(self, request: web.Request, rid: str) -> web.Response:
        batch, _ = self._batch(request)
        if batch is None:
            return error_reply(404, f"Batch {request.match_info['id']} not found.")
        if batch.task is not None:
            batch.task.cancel()
        del self.batches[batch.name]
        return json_reply({})

    async def _run(self, batch: _Batch, origin: str) -> None:
        """PENDING -> RUNNING -> SUCCEEDED (or CANCELLED, EXPIRED); results in input
        order, inline or in a responses file as the input came."""
        await asyncio.sleep(0)  # the create call answers PENDING first
        batch.state, batch.updated = "BATCH_STATE_RUNNING", utcnow()
        clock = batch.clock = LineClock(self.timing.draw("gemini"), len(batch.lines))
        if batch.cancel_asked:
            clock.cancel()
        wire = GeminiWire(batch.model)
        state = "BATCH_STATE_SUCCEEDED"
        for index, line in enumerate(batch.lines):
            turn = await clock.next_line(index)
            if turn != "answer":
                state = "BATCH_STATE_EXPIRED" if turn == "expired" else "BATCH_STATE_CANCELLED"
                break
            answer = self.core.answer_json(wire, line.request)
            self.core.stats.batch_line()
            batch.results.append(self._result(batch, answer.status, answer.body))
            batch.updated = utcnow()
        batch.output = self._output(batch, origin)
        batch.state, batch.ended = state, utcnow()
        batch.updated = batch.ended

    def _result(self, batch: _Batch, status: int, body: bytes | None) -> dict[str, Any]:
        parsed = from_json(body) if body is not None else None
        if status == 200 and isinstance(parsed, dict):
            batch.succeeded += 1
            return {"response": parsed}
        batch.failed += 1
        error = parsed.get("error") if isinstance(parsed, dict) else None
        return {"error": error if isinstance(error, dict) else from_json(error_body(500))["error"]}

    def _output(self, batch: _Batch, origin: str) -> dict[str, Any]:
        if batch.from_file is None:
            inlined = []
            for line, result in zip(batch.lines, batch.results, strict=False):
                metadata = (
                    line.metadata
                    if line.metadata is not None
                    else ({"key": line.key} if line.key is not None else None)
                )
                inlined.append({**result, **({"metadata": metadata} if metadata else {})})
            return {"inlinedResponses": {"inlinedResponses": inlined}}
        rows = []
        for line, result in zip(batch.lines, batch.results, strict=False):
            rows.append(to_json({**({"key": line.key} if line.key is not None else {}), **result}))
        name = f"files/batch-{batch.name.removeprefix('batches/')}"
        self.files.generated(name, b"".join(row + b"\n" for row in rows), origin)
        return {"responsesFile": name}


def _enqueued_refusal(model: str, limit: int, enqueued: int, wanted: int) -> web.Response:
    """The enqueued-token quota's 429: the quota named, no RetryInfo (it frees as
    earlier batches finish, not after a delay), no Retry-After."""
    metric = "generativelanguage.googleapis.com/batch_enqueued_tokens"
    message = (
        f"Enqueued tokens limit exceeded for model {model}: limit {limit}, already enqueued "
        f"{enqueued}, this batch {wanted}. Wait for earlier batches to finish, or send a "
        "smaller batch."
    )
    violation = {
        "quotaMetric": metric,
        "quotaId": "BatchEnqueuedTokensPerModelPerProject",
        "quotaDimensions": {"model": model},
        "quotaValue": str(limit),
    }
    details = [{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [violation]}]
    return web.Response(
        status=429, body=error_body(429, message, details), content_type="application/json"
    )

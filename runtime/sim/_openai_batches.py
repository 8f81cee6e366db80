"""The OpenAI Files and Batch APIs: JSONL input files, batches answered line by line by
the scripted rules (as the online endpoint would answer), output and error files."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.web_request import FileField
from pydantic_core import from_json, to_json

from ._batch_common import (
    BatchCalls,
    BatchTimer,
    Core,
    LineClock,
    Timing,
    json_response,
    now,
    parse_limit,
)
from ._types import Wire

_PURPOSES = frozenset(
    {"assistants", "batch", "fine-tune", "vision", "user_data", "evals", "batch_output"}
)
_EXPIRED = {
    "code": "batch_expired",
    "message": "This request could not be executed before the completion window expired.",
}
_CANCELLED = {
    "code": "batch_cancelled",
    "message": "This request was not executed because the batch was cancelled.",
}
_NO_JSON = {
    "code": "server_error",
    "message": "The server had an error while processing your request. Sorry about that!",
}
_DAY = 24 * 3600


@dataclass(slots=True)
class _File:
    id: str
    filename: str
    purpose: str
    content: bytes
    created_at: int

    def obj(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.content),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }


@dataclass(slots=True)
class _Batch:
    id: str
    input_file_id: str
    endpoint: str
    metadata: dict[str, str] | None
    created_at: int
    timing: Timing
    status: str = "validating"
    stamps: dict[str, int] = field(default_factory=dict)
    errors: list[dict[str, Any]] | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    total: int = 0
    completed: int = 0
    failed: int = 0
    clock: LineClock | None = None
    task: asyncio.Task[None] | None = None

    def obj(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": None if self.errors is None else {"object": "list", "data": self.errors},
            "input_file_id": self.input_file_id,
            "completion_window": "24h",
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "in_progress_at": self.stamps.get("in_progress_at"),
            "expires_at": self.created_at + _DAY,
            "finalizing_at": self.stamps.get("finalizing_at"),
            "completed_at": self.stamps.get("completed_at"),
            "failed_at": self.stamps.get("failed_at"),
            "expired_at": self.stamps.get("expired_at"),
            "cancelling_at": self.stamps.get("cancelling_at"),
            "cancelled_at": self.stamps.get("cancelled_at"),
            "request_counts": {
                "total": self.total,
                "completed": self.completed,
                "failed": self.failed,
            },
            "metadata": self.metadata,
        }


class OpenAIBatches:
    """``/v1/files`` and ``/v1/batches``. A batch's lines are answered by
    :meth:`SimCore.answer_json` with the wire of its ``endpoint``; the processing time
    and expiry come from the server's :class:`Timing`, overridden per batch by the
    metadata keys ``sim_batch_seconds`` and ``sim_expire_after``."""

    def __init__(self, core: Core, wires: dict[str, Wire], timing: BatchTimer) -> None:
        self.core = core
        self.wires = wires  # endpoint -> wire
        self.timing = timing
        self.calls = BatchCalls(core, wires["/v1/chat/completions"], "openai_batch")
        self.files: dict[str, _File] = {}
        self.batches: dict[str, _Batch] = {}
        self._ids = itertools.count(1)

    def add_routes(self, app: web.Application) -> None:
        h = self.calls.handler
        app.router.add_post("/v1/files", h(self._create_file))
        app.router.add_get("/v1/files", h(self._list_files))
        app.router.add_get("/v1/files/{id}", h(self._get_file))
        app.router.add_delete("/v1/files/{id}", h(self._delete_file))
        app.router.add_get("/v1/files/{id}/content", h(self._file_content))
        app.router.add_post("/v1/batches", h(self._create_batch))
        app.router.add_get("/v1/batches", h(self._list_batches))
        app.router.add_get("/v1/batches/{id}", h(self._get_batch))
        app.router.add_post("/v1/batches/{id}/cancel", h(self._cancel_batch))

    def cancel_all(self) -> None:
        """Stop every batch task (the server is closing)."""
        for batch in self.batches.values():
            if batch.task is not None:
                batch.task.cancel()

    def _id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):024x}"

    # Files

    async def _create_file(self, request: web.Request, rid: str) -> web.Response:
        if not request.content_type.startswith("multipart/"):
            return self.calls.error(400, "The request must be multipart/form-data.", rid)
        form = await request.post()
        upload, purpose = form.get("file"), form.get("purpose")
        if not isinstance(purpose, str) or purpose not in _PURPOSES:
            message = "Missing or invalid parameter: 'purpose'."
            return self.calls.error(400, message, rid, param="purpose")
        if not isinstance(upload, FileField):
            return self.calls.error(400, "Missing required parameter: 'file'.", rid, param="file")
        content = upload.file.read()
        name = upload.filename or "upload.jsonl"
        file = _File(self._id("file-sim"), name, purpose, content, now())
        self.files[file.id] = file
        return json_response(to_json(file.obj()))

    def _file(self, request: web.Request) -> _File | None:
        return self.files.get(request.match_info["id"])

    def _no_file(self, request: web.Request, rid: str) -> web.Response:
        message = f"No such File object: {request.match_info['id']}"
        return self.calls.error(404, message, rid, param="id")

    async def _get_file(self, request: web.Request, rid: str) -> web.Response:
        file = self._file(request)
        return self._no_file(request, rid) if file is None else json_response(to_json(file.obj()))

    async def _file_content(self, request: web.Request, rid: str) -> web.Response:
        file = self._file(request)
        if file is None:
            return self._no_file(request, rid)
        return web.Response(body=file.content, content_type="application/octet-stream")

    async def _delete_file(self, request: web.Request, rid: str) -> web.Response:
        file = self.files.pop(request.match_info["id"], None)
        if file is None:
            return self._no_file(request, rid)
        return json_response(to_json({"id": file.id, "object": "file", "deleted": True}))

    async def _list_files(self, request: web.Request, rid: str) -> web.Response:
        limit = parse_limit(request, 10000, 10000)
        if limit is None:
            return self.calls.error(400, "Invalid 'limit'.", rid, param="limit")
        files = [
            f for f in self.files.values() if request.query.get("purpose", f.purpose) == f.purpose
        ]
        if request.query.get("order", "desc") == "desc":
            files.reverse()
        return self._page([f.obj() for f in files], request.query.get("after"), limit)

    def _page(self, items: list[dict[str, Any]], after: str | None, limit: int) -> web.Response:
        if after is not None:
            ids = [item["id"] for item in items]
            items = items[ids.index(after) + 1 :] if after in ids else []
        data = items[:limit]
        body = {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": len(items) > limit,
        }
        return json_response(to_json(body))

    # Batches

    async def _create_batch(self, request: web.Request, rid: str) -> web.Response:
        try:
            body = from_json(await request.read())
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return self.calls.error(400, "We could not parse the JSON body of your request.", rid)
        file_id, endpoint = body.get("input_file_id"), body.get("endpoint")
        window, metadata = body.get("completion_window"), body.get("metadata")
        if not isinstance(file_id, str) or file_id not in self.files:
            message = f"No such File object: {file_id}" if isinstance(file_id, str) else None
            return self.calls.error(
                400, message or "Missing required parameter: 'input_file_id'.", rid,
                param="input_file_id",
            )  # fmt: skip
        if self.files[file_id].purpose != "batch":
            message = "The input file must be uploaded with purpose 'batch'."
            return self.calls.error(400, message, rid, param="input_file_id")
        if endpoint not in self.wires:
            message = f"Invalid 'endpoint': {endpoint!r}; supported: {', '.join(self.wires)}."
            return self.calls.error(400, message, rid, param="endpoint")
        if window != "24h":
            message = "Invalid 'completion_window': only '24h' is supported."
            return self.calls.error(400, message, rid, param="completion_window")
        if metadata is not None and not (
            isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
        ):
            return self.calls.error(400, "Invalid 'metadata'.", rid, param="metadata")
        timing = _timing(self.timing, metadata)
        if timing is None:
            message = "Invalid simulator metadata: sim_batch_seconds or sim_expire_after."
            return self.calls.error(400, message, rid, param="metadata")
        batch = _Batch(self._id("batch_sim"), file_id, endpoint, metadata, now(), timing)
        self.batches[batch.id] = batch
        batch.task = asyncio.get_running_loop().create_task(self._run(batch))
        return json_response(to_json(batch.obj()))

    def _batch(self, request: web.Request) -> _Batch | None:
        return self.batches.get(request.match_info["id"])

    def _no_batch(self, request: web.Request, rid: str) -> web.Response:
        message = f"No batch found with id '{request.match_info['id']}'."
        return self.calls.error(404, message, rid, param="id")

    async def _get_batch(self, request: web.Request, rid: str) -> web.Response:
        batch = self._batch(request)
        if batch is None:
            return self._no_batch(request, rid)
        return json_response(to_json(batch.obj()))

    async def _list_batches(self, request: web.Request, rid: str) -> web.Response:
        limit = parse_limit(request, 20, 100)
        if limit is None:
            return self.calls.error(400, "Invalid 'limit'.", rid, param="limit")
        items = [b.obj() for b in reversed(self.batches.values())]
        return self._page(items, request.query.get("after"), limit)

    async def _cancel_batch(self, request: web.Request, rid: str) -> web.Response:
        batch = self._batch(request)
        if batch is None:
            return self._no_batch(request, rid)
        if batch.status not in ("validating", "in_progress", "finalizing", "cancelling"):
            message = f"Cannot cancel a batch with status '{batch.status}'."
            return self.calls.error(409, message, rid)
        if batch.status != "cancelling":
            batch.status = "cancelling"
            batch.stamps["cancelling_at"] = now()
            if batch.clock is not None:
                batch.clock.cancel()
        return json_response(to_json(batch.obj()))

    async def _run(self, batch: _Batch) -> None:
        """validating -> in_progress -> finalizing -> completed (or failed, expired,
        cancelling -> cancelled)."""
        await asyncio.sleep(0)  # the create call answers "validating" first
        lines, errors = _validate(self.files[batch.input_file_id].content, batch.endpoint)
        if errors:
            batch.errors = errors
            batch.status = "failed"
            batch.stamps["failed_at"] = now()
            return
        if batch.status == "cancelling":
            batch.stamps["cancelled_at"] = now()
            batch.status = "cancelled"
            return
        batch.total = len(lines)
        batch.status = "in_progress"
        batch.stamps["in_progress_at"] = now()
        clock = batch.clock = LineClock(batch.timing, len(lines))
        wire = self.wires[batch.endpoint]
        outputs: list[bytes] = []
        failures: list[bytes] = []
        expired = False
        for index, line in enumerate(lines):
            custom_id = line["custom_id"]
            turn = "expired" if expired else await clock.next_line(index)
            if turn != "answer":
                expired = turn == "expired"
                reason = _EXPIRED if expired else _CANCELLED
                failures.append(self._line(custom_id, None, reason))
                batch.failed += 1
                continue
            answer = self.core.answer_json(wire, line["body"])
            self.core.stats.batch_line()
            if answer.body is None:
                failures.append(self._line(custom_id, None, _NO_JSON))
                batch.failed += 1
                continue
            response = {
                "status_code": answer.status,
                "request_id": answer.request_id,
                "body": _json_or_text(answer.body),
            }
            if answer.status == 200:
                outputs.append(self._line(custom_id, response, None))
                batch.completed += 1
            else:
                failures.append(self._line(custom_id, response, None))
                batch.failed += 1
        if batch.status != "cancelling" and not expired:
            batch.status = "finalizing"
            batch.stamps["finalizing_at"] = now()
        batch.output_file_id = self._output(batch, "output", outputs)
        batch.error_file_id = self._output(batch, "error", failures)
        if batch.status == "cancelling":
            batch.status = "cancelled"
            batch.stamps["cancelled_at"] = now()
        elif expired:
            batch.status = "expired"
            batch.stamps["expired_at"] = now()
        else:
            batch.status = "completed"
            batch.stamps["completed_at"] = now()

    def _line(
        self, custom_id: str, response: dict[str, Any] | None, error: dict[str, str] | None
    ) -> bytes:
        line = {"id": self._id("batch_req_sim"), "custom_id": custom_id}
        return to_json({**line, "response": response, "error": error})

    def _output(self, batch: _Batch, kind: str, lines: list[bytes]) -> str | None:
        if not lines:
            return None
        content = b"".join(line + b"\n" for line in lines)
        file = _File(
            self._id("file-sim"), f"{batch.id}_{kind}.jsonl", "batch_output", content, now()
        )
        self.files[file.id] = file
        return file.id


def _timing(timer: BatchTimer, metadata: dict[str, str] | None) -> Timing | None:
    """The batch's timing: drawn for it, its metadata overriding (``sim_batch_seconds``:
    fixed seconds, no stall; ``sim_expire_after``; ``sim_stall``: "1" stalls it)."""
    drawn = timer.draw("openai")
    metadata = metadata or {}
    try:
        seconds = float(metadata.get("sim_batch_seconds", drawn.seconds))
        raw = metadata.get("sim_expire_after")
        expire_after = drawn.expire_after if raw is None else int(raw)
    except ValueError:
        return None
    if seconds < 0 or (expire_after is not None and expire_after < 0):
        return None
    stall = drawn.stall if "sim_batch_seconds" not in metadata else False
    stall = metadata.get("sim_stall", "1" if stall else "0") == "1"
    return Timing(seconds, expire_after, stall, drawn.window, drawn.cancel_seconds)


def _json_or_text(body: bytes) -> Any:
    try:
        return from_json(body)
    except ValueError:
        return body.decode(errors="replace")


def _validate(content: bytes, endpoint: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The input file's requests, or the errors that fail the batch (``line`` is 1-based)."""
    lines: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()

    def fail(number: int, code: str, message: str, param: str | None = None) -> None:
        errors.append({"code": code, "message": message, "param": param, "line": number})

    for number, raw in enumerate(content.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            line = from_json(raw)
        except ValueError:
            fail(number, "invalid_json_line", "This line is not parseable as valid JSON.")
            continue
        if not isinstance(line, dict):
            fail(number, "invalid_json_line", "This line is not a JSON object.")
            continue
        custom_id = line.get("custom_id")
        if not isinstance(custom_id, str) or not custom_id:
            message = "Missing required parameter: 'custom_id'."
            fail(number, "missing_required_parameter", message, "custom_id")
        elif custom_id in seen:
            message = f"The custom_id '{custom_id}' is not unique within the batch."
            fail(number, "duplicate_custom_id", message, "custom_id")
        else:
            seen.add(custom_id)
        if line.get("method") != "POST":
            fail(number, "invalid_method", "The method must be 'POST'.", "method")
        if line.get("url") != endpoint:
            message = f"The url {line.get('url')!r} does not match the batch endpoint {endpoint!r}."
            fail(number, "invalid_url", message, "url")
        if not isinstance(line.get("body"), dict):
            fail(
                number, "missing_required_parameter", "Missing required parameter: 'body'.", "body"
            )
        lines.append(line)
    if not lines and not errors:
        fail(1, "empty_file", "The input file is empty.")
    return lines, errors

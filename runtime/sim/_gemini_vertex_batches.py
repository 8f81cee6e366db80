"""Vertex AI batch prediction for Gemini: ``batchPredictionJobs`` reading a JSONL of
``{"request": GenerateContentRequest}`` lines from Cloud Storage (the simulator's own,
`_gemini_gcs`) and writing ``predictions.jsonl`` (each line with its ``request``, its
``response`` or its ``status``) under the output prefix; created, got, listed, cancelled
and deleted; paced by the simulator's batch timing."""

from __future__ import annotations

import asyncio
import itertools
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
    read_json,
    stamp,
    utcnow,
)
from ._gemini_gcs import GcsObjects, split_uri
from ._gemini_request import get, model_id
from ._gemini_wire import GeminiWire

_PREFIX = "/{version}/projects/{project}/locations/{location}/batchPredictionJobs"
_DONE = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED")


@dataclass(slots=True)
class _Job:
    name: str
    display_name: str
    model: str
    input_config: dict[str, Any]
    output_config: dict[str, Any]
    created: datetime
    state: str = "JOB_STATE_PENDING"
    started: datetime | None = None
    ended: datetime | None = None
    succeeded: int = 0
    failed: int = 0
    output_dir: str | None = None
    error: dict[str, Any] | None = None
    clock: LineClock | None = None
    task: asyncio.Task[None] | None = None
    cancel_asked: bool = False
    lines: list[dict[str, Any]] = field(default_factory=list)

    def obj(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "displayName": self.display_name,
            "model": self.model,
            "inputConfig": self.input_config,
            "outputConfig": self.output_config,
            "state": self.state,
            "createTime": stamp(self.created),
            "updateTime": stamp(self.ended or self.started or self.created),
        }
        if self.started is not None:
            out["startTime"] = stamp(self.started)
        if self.ended is not None:
            out["endTime"] = stamp(self.ended)
        if self.state in _DONE or self.succeeded or self.failed:
            out["completionStats"] = {
                "successfulCount": str(self.succeeded),
                "failedCount": str(self.failed),
                "incompleteCount": str(len(self.lines) - self.succeeded - self.failed),
            }
        if self.output_dir is not None:
            out["outputInfo"] = {"gcsOutputDirectory": self.output_dir}
        if self.error is not None:
            out["error"] = self.error
        return out


class VertexBatches:
    """``projects/{p}/locations/{l}/batchPredictionJobs`` over the simulator's buckets."""

    def __init__(self, core: Core, gcs: GcsObjects, timing: BatchTimer) -> None:
        self.core = core
        self.gcs = gcs
        self.timing = timing
        self.calls = Calls(core, "vertex_batch", batch_call=True)
        self.jobs: dict[str, _Job] = {}
        self._ids = itertools.count(1_000_000_000_000_000_001)

    def add_routes(self, app: web.Application) -> None:
        h = self.calls.handler
        app.router.add_post(_PREFIX, h(self._create))
        app.router.add_get(_PREFIX, h(self._list))
        app.router.add_get(_PREFIX + "/{id}", h(self._get))
        app.router.add_post(_PREFIX + "/{id}", h(self._cancel))  # {id}:cancel
        app.router.add_delete(_PREFIX + "/{id}", h(self._delete))

    def cancel_all(self) -> None:
        for job in self.jobs.values():
            if job.task is not None:
                job.task.cancel()

    def _parent(self, request: web.Request) -> str:
        info = request.match_info
        return f"projects/{info['project']}/locations/{info['location']}/batchPredictionJobs"

    async def _create(self, request: web.Request, rid: str) -> web.Response:
        body = await read_json(request)
        if not isinstance(body, dict):
            return error_reply(400, "Invalid JSON payload received.")
        model, inputs, outputs = (
            get(body, "model"),
            get(body, "inputConfig"),
            get(body, "outputConfig"),
        )
        uris = get(get(inputs, "gcsSource") or {}, "uris") if isinstance(inputs, dict) else None
        prefix = (
            get(get(outputs, "gcsDestination") or {}, "outputUriPrefix")
            if isinstance(outputs, dict)
            else None
        )
        if not isinstance(model, str) or not model:
            return error_reply(400, "model is required.")
        if not isinstance(uris, list) or not uris or not isinstance(prefix, str):
            return error_reply(
                400,
                "Only a Cloud Storage source (gcsSource.uris) and destination "
                "(gcsDestination) are simulated.",
            )
        lines: list[dict[str, Any]] = []
        try:
            for uri in uris:
                content = self.gcs.read(str(uri))
                if content is None:
                    return error_reply(400, f"Unable to read {uri}: no such object.")
                lines.extend(_line(raw) for raw in content.splitlines() if raw.strip())
            split_uri(prefix.rstrip("/") + "/x")
        except ValueError as exc:
            return error_reply(400, str(exc))
        job_id = str(next(self._ids))
        name = f"{self._parent(request)}/{job_id}"
        display = get(body, "displayName")
        job = _Job(name, str(display or job_id), model, inputs, outputs, utcnow(), lines=lines)
        self.jobs[name] = job
        job.task = asyncio.get_running_loop().create_task(self._run(job, prefix))
        return json_reply(job.obj())

    def _job(self, request: web.Request) -> tuple[_Job | None, str]:
        raw = request.match_info["id"]
        job_id, _, action = raw.partition(":")
        return self.jobs.get(f"{self._parent(request)}/{job_id}"), action

    async def _get(self, request: web.Request, rid: str) -> web.Response:
        job, _ = self._job(request)
        return (
            error_reply(404, "The BatchPredictionJob does not exist.")
            if job is None
            else json_reply(job.obj())
        )

    async def _list(self, request: web.Request, rid: str) -> web.Response:
        size = page_size(request, 100, 1000)
        if size is None:
            return error_reply(400, "Invalid value at 'page_size' (TYPE_INT32)")
        parent = self._parent(request)
        items = [j.obj() for j in reversed(self.jobs.values()) if j.name.startswith(parent)]
        return json_reply(paged(items, request, "batchPredictionJobs", size) if items else {})

    async def _cancel(self, request: web.Request, rid: str) -> web.Response:
        job, action = self._job(request)
        if action != "cancel":
            return error_reply(404, f"Unknown method: {action or 'POST'}.")
        if job is None:
            return error_reply(404, "The BatchPredictionJob does not exist.")
        if job.state in _DONE:
            return error_reply(
                400, f"The BatchPredictionJob is already {job.state}: it cannot be cancelled."
            )
        job.cancel_asked = True
        job.state = "JOB_STATE_CANCELLING"
        if job.clock is not None:
            job.clock.cancel()
        return json_reply({})

    async def _delete(self, request: web.Request, rid: str) -> web.Response:
        job, _ = self._job(request)
        if job is None:
            return error_reply(404, "The BatchPredictionJob does not exist.")
        if job.task is not None:
            job.task.cancel()
        del self.jobs[job.name]
        operation = f"{job.name}/operations/{next(self._ids)}"
        return json_reply(
            {
                "name": operation,
                "done": True,
                "response": {"@type": "type.googleapis.com/google.protobuf.Empty"},
            }
        )

    async def _run(self, job: _Job, prefix: str) -> None:
        """PENDING -> RUNNING -> SUCCEEDED (or CANCELLED, EXPIRED): every line answered
        as ``generateContent`` would, written to
        ``{prefix}/prediction-model-{time}/predictions.jsonl``."""
        await asyncio.sleep(0)
        job.state, job.started = "JOB_STATE_RUNNING", utcnow()
        clock = job.clock = LineClock(self.timing.draw("vertex"), len(job.lines))
        if job.cancel_asked:
            clock.cancel()
        wire = GeminiWire(model_id(job.model), vertex=True)
        rows: list[bytes] = []
        state = "JOB_STATE_SUCCEEDED"
        for index, line in enumerate(job.lines):
            turn = await clock.next_line(index)
            if turn != "answer":
                state = "JOB_STATE_EXPIRED" if turn == "expired" else "JOB_STATE_CANCELLED"
                break
            answer = self.core.answer_json(wire, line.get("request"))
            self.core.stats.batch_line()
            row = dict(line)
            parsed = from_json(answer.body) if answer.body is not None else None
            if answer.status == 200 and isinstance(parsed, dict):
                row["response"], row["status"] = parsed, ""
                job.succeeded += 1
            else:
                error = parsed.get("error") if isinstance(parsed, dict) else None
                message = error.get("message") if isinstance(error, dict) else "Internal error."
                row["status"] = f"Bad Request: {message}" if answer.status < 500 else str(message)
                job.failed += 1
            row["processed_time"] = stamp(utcnow())
            rows.append(to_json(row))
        bucket, base = split_uri(prefix.rstrip("/") + "/x")
        folder = f"{base[:-1]}prediction-model-{utcnow().strftime('%Y-%m-%dT%H:%M:%S.%fZ')}"
        self.gcs.put(
            bucket,
            f"{folder}/predictions.jsonl",
            b"".join(r + b"\n" for r in rows),
            "application/jsonl",
        )
        job.output_dir = f"gs://{bucket}/{folder}"
        job.state, job.ended = state, utcnow()


def _line(raw: bytes) -> dict[str, Any]:
    try:
        line = from_json(raw)
    except ValueError:
        raise ValueError("an input line is not JSON") from None
    if not isinstance(line, dict) or not isinstance(line.get("request"), dict):
        raise ValueError('every input line needs a "request" object')
    return line

"""Gemini's provider batches: the Gemini API's batch mode and Vertex AI's batch
prediction, as `BatchAPI`s (the shapes, with no I/O, are `_gemini_batch_wire`'s).

- Gemini API: a batch of lines up to 20 MB goes inline in its create call, a larger one
  as a JSONL uploaded through the Files API (resumable upload, up to 2 GB); each line
  keyed by its `custom_id`, results matched by key. The per-model enqueued-token quota
  refuses a batch with a 429 that names no delay (it frees as earlier batches end): the
  submission waits and tries again, its lines kept; so does one that would make more
  than 100 batches out at once (the project's limit).
- Vertex AI: the lines as a JSONL object in Cloud Storage (`batch_bucket=`), a
  `batchPredictionJob` reading it and writing `predictions.jsonl` under an output
  prefix; the custom id rides in each request's labels, which Vertex echoes back.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ..errors import InvalidOptionsError, RateLimitError
from . import _gemini_batch_wire as bw
from ._batch_wire import BatchState, LineResult
from .batch_api import cancel_batch

if TYPE_CHECKING:
    # A `gemini.GeminiModel` (which makes these APIs: not imported, so that the two
    # modules do not import each other): its `api_version`, `project`, `location` and
    # the skeleton's calls.
    GeminiModel = Any

__all__ = ["GeminiBatchAPI", "VertexBatchAPI"]

# Room left in an inline create call for what wraps its lines.
_INLINE_LINES_BYTES = bw.MAX_INLINE_BYTES - 64 * 1024
_PAGE = 1000
_MAX_PAGES = 5
# How long a submission waits for room (the enqueued-token quota, the 100 batches out)
# before its lines fail: a batch API's own window.
_MAX_WAIT = 24 * 3600.0
_FIRST_WAIT, _LONGEST_WAIT = 1.0, 60.0


async def _waiting_for_room(attempt: Any) -> Any:
    """`attempt()` until it is not refused for room (a retryable 429): waiting
    `RetryInfo`'s delay when there is one, else backing off (1 s doubling to 60 s),
    for up to a day."""
    delay, waited = _FIRST_WAIT, 0.0
    while True:
        try:
            return await attempt()
        except RateLimitError as exc:
            if not exc.retryable or waited >= _MAX_WAIT:
                raise
            given = exc.details.get("retry_after")
            wait = given if given is not None else delay
            wait *= random.uniform(0.9, 1.1)
            await asyncio.sleep(wait)
            waited += wait
            delay = min(delay * 2, _LONGEST_WAIT)


class GeminiBatchAPI:
    """The Gemini API's batch mode for one model (`models/{m}:batchGenerateContent`,
    `batches/{id}`, the Files API)."""

    provider = "gemini"
    max_lines = 1_000_000
    max_bytes = bw.MAX_FILE_BYTES

    def __init__(self, model: GeminiModel) -> None:
        self.model = model
        self.version = model.api_version
        self.endpoint = model.request_path(stream=False)

    def encode(self, custom_id: str, body: bytes) -> bytes:
        return bw.encode(custom_id, body)

    async def submit(self, lines: Sequence[bytes], tag: str) -> str:
        if sum(len(line) + 1 for line in lines) <= _INLINE_LINES_BYTES:
            body = bw.create_body(tag, lines=list(lines))
        else:
            body = bw.create_body(tag, file_name=await self._upload(lines, tag))
        return str(await _waiting_for_room(lambda: self._create(body)))

    async def _create(self, body: dict[str, Any]) -> str:
        await self._room()
        path = f"/{self.version}/models/{self.model.name}:batchGenerateContent"
        created = await self.model._call_json("POST", path, body)
        return str(created["name"])

    async def _room(self) -> None:
        """RateLimitError (retryable, no delay) while 100 batches are out."""
        running = 0
        async for batch in self._pages():
            if not bw.state(batch).ended:
                running += 1
        if running >= bw.MAX_BATCHES:
            raise RateLimitError(
                f"gemini: {running} batches are out (at most {bw.MAX_BATCHES})",
                provider=self.provider,
                status=None,
            )

    async def _upload(self, lines: Sequence[bytes], tag: str) -> str:
        """The lines as a JSONL file through a resumable upload: its `files/...` name."""
        content = b"\n".join(lines) + b"\n"
        start = {
            "X-Goog-Upload-Protocol": "resumable",
            "X-Goog-Upload-Command": "start",
            "X-Goog-Upload-Header-Content-Length": str(len(content)),
            "X-Goog-Upload-Header-Content-Type": "application/jsonl",
        }
        meta = {"file": {"displayName": tag, "mimeType": "application/jsonl"}}
        _, opened = await self.model._call(
            "POST", f"/upload/{self.version}/files", body=meta, headers=start
        )
        url = opened.headers.get("X-Goog-Upload-URL")
        if not url:
            raise self.model._bad_reply(opened.status, "an upload started without its URL")
        finish = {"X-Goog-Upload-Command": "upload, finalize", "X-Goog-Upload-Offset": "0"}
        raw, done = await self.model._call("POST", url, content=content, headers=finish)
        return str(self.model._json(raw, done.status)["file"]["name"])

    async def _pages(self, path: str = "batches", key: str = "operations") -> Any:
        token: str | None = None
        for _ in range(_MAX_PAGES):
            query = f"?pageSize={_PAGE}" + (f"&pageToken={token}" if token else "")
            page = await self.model._call_json("GET", f"/{self.version}/{path}{query}")
            for item in page.get(key) or ():
                yield item
            token = page.get("nextPageToken")
            if not token:
                return

    async def find(self, tag: str, since: float, lines: int) -> str | None:
        async for operation in self._pages():
            metadata = operation.get("metadata") or {}
            if metadata.get("displayName") == tag:
                return str(operation["name"])
        async for file in self._pages("files", "files"):
            if file.get("displayName") == tag:  # uploaded, never made a batch
                made = bw.create_body(tag, file_name=str(file["name"]))
                return str(await _waiting_for_room(functools.partial(self._create, made)))
        return None

    async def state(self, batch_id: str) -> BatchState:
        return bw.state(await self.model._call_json("GET", f"/{self.version}/{batch_id}"))

    async def results(self, state: BatchState) -> bytes:
        resource = await self.model._call_json("GET", f"/{self.version}/{state.id}")
        if not state.files:
            return bw.results(resource)
        path = f"/download/{self.version}/{state.files[0]}:download?alt=media"
        raw, _ = await self.model._call("GET", path)
        return bw.results(resource, raw)

    async def cancel(self, batch_id: str) -> None:
        await cancel_batch(self, self.model, batch_id, f"/{self.version}/{batch_id}:cancel")

    def read_line(self, line: bytes) -> LineResult:
        return bw.read_line(line)


class VertexBatchAPI:
    """Vertex AI batch prediction for one model: lines in `gs://{bucket}/{prefix}`,
    `projects/{p}/locations/{l}/batchPredictionJobs`, Cloud Storage's JSON API at
    `storage_url`."""

    provider = "gemini"
    max_lines = 200_000
    max_bytes = 1024**3

    def __init__(self, model: GeminiModel, bucket: str, storage_url: str) -> None:
        if not bucket.startswith("gs://"):
            raise InvalidOptionsError(
                f"batch_bucket must be a gs:// URI (gs://bucket/prefix), not {bucket!r}"
            )
        self.model = model
        self.bucket, _, prefix = bucket.removeprefix("gs://").partition("/")
        self.prefix = prefix.strip("/")
        self.storage = storage_url.rstrip("/")
        self.parent = f"/{model.api_version}/projects/{model.project}/locations/{model.location}"
        self.endpoint = model.request_path(stream=False)

    def encode(self, custom_id: str, body: bytes) -> bytes:
        return bw.encode_vertex(custom_id, body)

    def _object(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    async def submit(self, lines: Sequence[bytes], tag: str) -> str:
        name = self._object(tag, "input.jsonl")
        content = b"\n".join(lines) + b"\n"
        upload = (
            f"{self.storage}/upload/storage/v1/b/{self.bucket}/o"
            f"?uploadType=media&name={quote(name, safe='')}"
        )
        headers = {"content-type": "application/jsonl"}
        await self.model._call("POST", upload, content=content, headers=headers)
        body = bw.vertex_create_body(
            tag,
            self.model.name,
            f"gs://{self.bucket}/{name}",
            f"gs://{self.bucket}/{self._object(tag, 'output')}",
        )

        async def create() -> str:
            created = await self.model._call_json(
                "POST", f"{self.parent}/batchPredictionJobs", body
            )
            return str(created["name"])

        return str(await _waiting_for_room(create))

    async def find(self, tag: str, since: float, lines: int) -> str | None:
        token: str | None = None
        for _ in range(_MAX_PAGES):
            query = f"?pageSize={_PAGE}" + (f"&pageToken={token}" if token else "")
            page = await self.model._call_json("GET", f"{self.parent}/batchPredictionJobs{query}")
            for job in page.get("batchPredictionJobs") or ():
                if job.get("displayName") == tag:
                    return str(job["name"])
            token = page.get("nextPageToken")
            if not token:
                break
        return None

    async def state(self, batch_id: str) -> BatchState:
        return bw.state(await self.model._call_json("GET", self._job(batch_id)))

    def _job(self, batch_id: str) -> str:
        return f"/{self.model.api_version}/{batch_id}"

    async def results(self, state: BatchState) -> bytes:
        out = b""
        for uri in state.files:
            bucket, _, name = uri.removeprefix("gs://").partition("/")
            path = (
                f"{self.storage}/download/storage/v1/b/{bucket}/o/{quote(name, safe='')}?alt=media"
            )
            raw, _ = await self.model._call("GET", path)
            out += bw.results({}, raw)
        return out

    async def cancel(self, batch_id: str) -> None:
        await cancel_batch(self, self.model, batch_id, self._job(batch_id) + ":cancel")

    def read_line(self, line: bytes) -> LineResult:
        return bw.read_line(line)

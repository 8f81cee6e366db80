"""The providers' batch APIs: OpenAI's Files + Batch API and Anthropic's Message Batches.

A `BatchAPI` encodes a line (a `custom_id` and the request body an online call would
send, as JSON) once, where the run is, submits lines as those bytes, reads a batch's
state, downloads its results as the provider's own JSONL, and cancels. `split_results`
cuts that JSONL into each line's bytes by `custom_id` (what a job's pool routes: on Ray
the bytes go back to the runner that asked), and `read_line` reads one into a
`LineResult`, where the run is. The raw JSONL is what a job's ledger keeps, so a resumed
job reads its results the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pydantic_core

from ..errors import ProviderBatchError, ProviderError, ServerError
from ._anthropic_wire import compact_betas
from ._batch_wire import BatchAPI, BatchState, LineResult, MinimumLines

if TYPE_CHECKING:
    from ._http import HTTPModel

__all__ = [
    "AnthropicBatchAPI",
    "BatchAPI",
    "BatchState",
    "LineResult",
    "MinimumLines",
    "OpenAIBatchAPI",
    "cancel_batch",
    "split_results",
]

_PAGE = 100
_MAX_PAGES = 20  # how far back a lost submission is looked for (2,000 batches)
# Anthropic's error types, as the HTTP status an online call would have had.
_ANTHROPIC_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


async def cancel_batch(api: BatchAPI, model: HTTPModel, batch_id: str, path: str) -> None:
    """POST a batch's cancel `path`. A cancel refused with 409 (Conflict) that met a
    batch already ended (what the providers answer then) left nothing to cancel: no
    error."""
    try:
        await model._call_json("POST", path)
    except ProviderError as exc:
        if exc.details.get("status") != 409:
            raise
        try:
            ended = (await api.state(batch_id)).ended
        except ProviderError:
            ended = False
        if not ended:
            raise


def _lines(raw: bytes) -> bytes:
    """A results file as lines, each ended by a newline (the last one too)."""
    return raw if raw.endswith(b"\n") or not raw else raw + b"\n"


def split_results(raw: bytes) -> Iterator[tuple[str, bytes]]:
    """A batch's results JSONL, a line at a time: (its custom_id, its bytes). Lines
    that are not a JSON object with a custom_id are left out (a batch's missing lines
    are failed by the pool)."""
    for line in raw.splitlines():
        if line.strip():
            try:
                data = pydantic_core.from_json(line)
            except ValueError:
                continue
            if isinstance(data, dict) and isinstance(data.get("custom_id"), str):
                yield data["custom_id"], line


def _object(line: bytes) -> dict[str, Any]:
    data = pydantic_core.from_json(line)
    if not isinstance(data, dict):
        raise ValueError("a batch result line is not a JSON object")
    return data


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _timestamp(value: Any) -> float | None:
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


class OpenAIBatchAPI:
    """`/v1/files` + `/v1/batches` (a 24 h window; 50,000 lines and 200 MB a file).

    A batch carries its tag in `metadata.raygent_batch` and its file is named after it,
    so a submission cut off between the upload and the batch is found again.
    """

    provider = "openai"
    max_lines = 50_000
    max_bytes = 200 * 1024 * 1024

    def __init__(self, model: HTTPModel, endpoint: str) -> None:
        self.model = model
        self.endpoint = endpoint
        self._url = b',"method":"POST","url":' + pydantic_core.to_json(endpoint) + b',"body":'

    def encode(self, custom_id: str, body: bytes) -> bytes:
        return b'{"custom_id":' + pydantic_core.to_json(custom_id) + self._url + body + b"}"

    async def submit(self, lines: Sequence[bytes], tag: str) -> str:
        content = b"\n".join(lines) + b"\n"
        upload = await self.model._call_json(
            "POST",
            "/files",
            files={"file": (f"{tag}.jsonl", content, "application/jsonl")},
            form={"purpose": "batch"},
        )
        return await self._create(str(upload["id"]), tag)

    async def _create(self, file_id: str, tag: str) -> str:
        body = {
            "input_file_id": file_id,
            "endpoint": self.endpoint,
            "completion_window": "24h",
            "metadata": {"raygent_batch": tag},
        }
        created = await self.model._call_json("POST", "/batches", body)
        return str(created["id"])

    async def find(self, tag: str, since: float, lines: int) -> str | None:
        async for batch in self._pages("/batches", since):
            if (batch.get("metadata") or {}).get("raygent_batch") == tag:
                return str(batch["id"])
        async for file in self._pages("/files?purpose=batch", since):
            if file.get("filename") == f"{tag}.jsonl":  # uploaded, never made a batch
                return await self._create(str(file["id"]), tag)
        return None

    async def _pages(self, path: str, since: float) -> Any:
        after: str | None = None
        joiner = "&" if "?" in path else "?"
        for _ in range(_MAX_PAGES):
            query = f"{joiner}limit={_PAGE}" + (f"&after={after}" if after else "")
            page = await self.model._call_json("GET", path + query)
            data = page.get("data") or []
            for item in data:
                yield item
            created = [_timestamp(i.get("created_at")) or 0.0 for i in data]
            if not page.get("has_more") or not data or min(created) < since - 60:
                return
            after = str(data[-1]["id"])

    async def state(self, batch_id: str) -> BatchState:
        data = await self.model._call_json("GET", f"/batches/{batch_id}")
        status = str(data.get("status"))
        failure = None
        if status == "failed":
            errors = (data.get("errors") or {}).get("data") or [{}]
            first = errors[0] if isinstance(errors[0], dict) else {}
            line, message = first.get("line"), first.get("message") or "the batch failed"
            failure = ProviderBatchError(
                f"openai refused batch {batch_id}"
                + (f": line {line}" if line is not None else "")
                + f": {message}",
                provider=self.provider,
                batch_id=batch_id,
                line=line,
                provider_code=first.get("code"),
            )
        ended_at = next(
            (
                _timestamp(data.get(k))
                for k in ("completed_at", "failed_at", "expired_at", "cancelled_at")
                if data.get(k)
            ),
            None,
        )
        files = tuple(str(f) for f in (data.get("output_file_id"), data.get("error_file_id")) if f)
        return BatchState(
            id=batch_id,
            status=status,
            ended=status in ("completed", "failed", "expired", "cancelled"),
            created_at=_timestamp(data.get("created_at")),
            ended_at=ended_at,
            failure=failure,
            files=files,
        )

    async def results(self, state: BatchState) -> bytes:
        parts = [(await self.model._call("GET", f"/files/{f}/content"))[0] for f in state.files]
        return b"".join(_lines(p) for p in parts)

    async def cancel(self, batch_id: str) -> None:
        await cancel_batch(self, self.model, batch_id, f"/batches/{batch_id}/cancel")

    def read_line(self, line: bytes) -> LineResult:
        data = _object(line)
        custom_id = str(data.get("custom_id"))
        response, error = data.get("response"), data.get("error")
        if isinstance(response, dict) and response.get("status_code") == 200:
            body = response.get("body")
            if isinstance(body, dict):
                return LineResult(custom_id, "succeeded", body=body)
        if isinstance(error, dict) and error.get("code") == "batch_expired":
            return LineResult(custom_id, "expired")
        if isinstance(error, dict) and error.get("code") == "batch_cancelled":
            return LineResult(custom_id, "cancelled")
        if isinstance(response, dict):
            status = response.get("status_code")
            failure = self.model.line_error(
                status if isinstance(status, int) else 500,
                response.get("body") or {},
                response.get("request_id"),
            )
            return LineResult(custom_id, "errored", error=failure)
        said = error if isinstance(error, dict) else {}
        return LineResult(
            custom_id,
            "errored",
            error=ServerError(
                f"openai batch line failed: {said.get('code')}: {said.get('message')}",
                provider=self.provider,
                status=None,
                provider_code=said.get("code"),
            ),
        )


class AnthropicBatchAPI:
    """`/v1/messages/batches` (a 24 h window; 100,000 requests and 256 MB a batch).

    Message Batches carry no metadata: a creation cut off before its reply is found
    again among the batches created since it was recorded, by its number of requests
    (only when exactly one matches; its lines are checked by `custom_id` when its
    results arrive).
    """

    provider = "anthropic"
    endpoint = "/v1/messages"
    max_lines = 100_000
    max_bytes = 256 * 1024 * 1024

    def __init__(self, model: HTTPModel) -> None:
        self.model = model

    def encode(self, custom_id: str, body: bytes) -> bytes:
        return b'{"custom_id":' + pydantic_core.to_json(custom_id) + b',"params":' + body + b"}"

    async def submit(self, lines: Sequence[bytes], tag: str) -> str:
        content = b'{"requests":[' + b",".join(lines) + b"]}"
        # A beta a line needs (server-side compaction) is a header of the whole batch.
        given = self.model.extra_headers.get("anthropic-beta")
        betas = compact_betas(given) if b'"compact_20260112"' in content else None
        created = await self.model._call_json(
            "POST", "/v1/messages/batches", content=content, headers=betas
        )
        return str(created["id"])

    async def find(self, tag: str, since: float, lines: int) -> str | None:
        found: list[str] = []
        after: str | None = None
        for _ in range(_MAX_PAGES):
            query = f"?limit={_PAGE}" + (f"&after_id={after}" if after else "")
            page = await self.model._call_json("GET", "/v1/messages/batches" + query)
            data = page.get("data") or []
            for batch in data:
                created = _timestamp(batch.get("created_at")) or 0.0
                counts = batch.get("request_counts") or {}
                total = sum(v for v in counts.values() if isinstance(v, int))
                if created >= since - 60 and total == lines:
                    found.append(str(batch["id"]))
            oldest = min((_timestamp(b.get("created_at")) or 0.0 for b in data), default=0.0)
            if not page.get("has_more") or not data or oldest < since - 60:
                break
            after = page.get("last_id")
        return found[0] if len(found) == 1 else None

    async def state(self, batch_id: str) -> BatchState:
        data = await self.model._call_json("GET", f"/v1/messages/batches/{batch_id}")
        status = str(data.get("processing_status"))
        return BatchState(
            id=batch_id,
            status=status,
            ended=status == "ended",
            created_at=_timestamp(data.get("created_at")),
            ended_at=_timestamp(data.get("ended_at")),
        )

    async def results(self, state: BatchState) -> bytes:
        raw, _ = await self.model._call("GET", f"/v1/messages/batches/{state.id}/results")
        return _lines(raw)

    async def cancel(self, batch_id: str) -> None:
        path = f"/v1/messages/batches/{batch_id}/cancel"
        await cancel_batch(self, self.model, batch_id, path)

    def read_line(self, line: bytes) -> LineResult:
        data = _object(line)
        custom_id = str(data.get("custom_id"))
        result = _dict(data.get("result"))
        kind = result.get("type")
        if kind == "succeeded" and isinstance(result.get("message"), dict):
            return LineResult(custom_id, "succeeded", body=result["message"])
        if kind == "expired":
            return LineResult(custom_id, "expired")
        if kind == "canceled":
            return LineResult(custom_id, "cancelled")
        body = _dict(result.get("error"))
        inner = _dict(body.get("error")) or body
        status = _ANTHROPIC_STATUS.get(str(inner.get("type")), 500)
        failure = self.model.line_error(status, body or {"error": inner})
        return LineResult(custom_id, "errored", error=failure)

"""Gemini's batch wire, with no HTTP: the lines, the create bodies, a batch's state and
its results, for the Gemini API's batch mode and Vertex AI's batch prediction, in the
shapes `batch_api.BatchAPI` works with (lines encoded once; results as JSONL lines that
name their `custom_id`, so `split_results` routes them as it routes the others').

- Gemini API: a line is `{"key", "request"}` in a JSONL uploaded with the Files API
  (up to 2 GB), or the same requests inline (`{"request", "metadata": {"key"}}`, up to
  20 MB a create call); results come back in input order, each with its key, in a
  responses file or inline in the batch.
- Vertex AI: a line is `{"request"}` in a Cloud Storage JSONL; Vertex keeps no key, so
  the line's `custom_id` rides in the request's `labels` (which Vertex echoes back with
  the request in each output line).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pydantic_core

from ..errors import ProviderBatchError
from ._gemini_errors import error_from_body
from .batch_api import BatchState, LineResult

PROVIDER = "gemini"
MAX_INLINE_BYTES = 20 * 1024 * 1024
MAX_FILE_BYTES = 2 * 1024**3
MAX_BATCHES = 100  # concurrent batches a project may have
KEY_LABEL = "raygent_custom_id"
_DONE = {
    "BATCH_STATE_SUCCEEDED",
    "BATCH_STATE_FAILED",
    "BATCH_STATE_CANCELLED",
    "BATCH_STATE_EXPIRED",
    "JOB_STATE_SUCCEEDED",
    "JOB_STATE_FAILED",
    "JOB_STATE_CANCELLED",
    "JOB_STATE_EXPIRED",
    "JOB_STATE_PARTIALLY_SUCCEEDED",
}
_FAILED = ("BATCH_STATE_FAILED", "JOB_STATE_FAILED")
_UNANSWERED = {"CANCELLED": "cancelled", "EXPIRED": "expired"}


def encode(custom_id: str, body: bytes) -> bytes:
    """A Gemini API JSONL line: `{"key", "request"}` (`body`: the request's JSON)."""
    return b'{"key":' + pydantic_core.to_json(custom_id) + b',"request":' + body + b"}"


def encode_vertex(custom_id: str, body: bytes) -> bytes:
    """A Vertex AI JSONL line: `{"request"}`, the custom id in the request's labels."""
    request = pydantic_core.from_json(body)
    labels = {**(request.get("labels") or {}), KEY_LABEL: custom_id}
    return pydantic_core.to_json({"request": {**request, "labels": labels}})


def create_body(
    display_name: str, *, file_name: str | None = None, lines: list[bytes] | None = None
) -> dict[str, Any]:
    """The body of `models/{model}:batchGenerateContent`: the uploaded file's name, or
    the `encode`d lines inline (what fits in `MAX_INLINE_BYTES`)."""
    if (file_name is None) == (lines is None):
        raise ValueError("a batch is made of a file or of lines, one of them")
    if file_name is not None:
        source: dict[str, Any] = {"fileName": file_name}
    else:
        requests = []
        for line in lines or ():
            item = pydantic_core.from_json(line)
            requests.append({"request": item["request"], "metadata": {"key": item["key"]}})
        source = {"requests": {"requests": requests}}
    return {"batch": {"displayName": display_name, "inputConfig": source}}


def vertex_create_body(
    display_name: str, model: str, input_uri: str, output_prefix: str
) -> dict[str, Any]:
    """The body of `projects/{p}/locations/{l}/batchPredictionJobs`."""
    return {
        "displayName": display_name,
        "model": model if "/" in model else f"publishers/google/models/{model}",
        "inputConfig": {"instancesFormat": "jsonl", "gcsSource": {"uris": [input_uri]}},
        "outputConfig": {
            "predictionsFormat": "jsonl",
            "gcsDestination": {"outputUriPrefix": output_prefix},
        },
    }


def state(resource: dict[str, Any]) -> BatchState:
    """A batch as the provider describes it: the Gemini API's operation (`batches/...`,
    its `metadata` the batch) or Vertex AI's `batchPredictionJob`."""
    batch = _batch(resource)
    status = str(batch.get("state") or "BATCH_STATE_UNSPECIFIED")
    failure = None
    if status in _FAILED:
        error = resource.get("error") or batch.get("error") or {}
        message = error.get("message") if isinstance(error, dict) else None
        failure = ProviderBatchError(
            f"gemini failed the batch {resource.get('name')}: {message or status}",
            provider=PROVIDER,
            batch_id=resource.get("name"),
        )
    output = batch.get("output")
    named = output.get("responsesFile") if isinstance(output, dict) else None
    files: tuple[str, ...] = (str(named),) if named else ()
    info = batch.get("outputInfo")
    if isinstance(info, dict) and info.get("gcsOutputDirectory"):
        files = (f"{info['gcsOutputDirectory']}/predictions.jsonl",)
    return BatchState(
        id=str(resource.get("name")),
        status=status,
        ended=status in _DONE,
        created_at=_time(batch.get("createTime")),
        ended_at=_time(batch.get("endTime")),
        failure=failure,
        files=files,
    )


def results(resource: dict[str, Any], file_content: bytes | None = None) -> bytes:
    """A finished batch's results as JSONL lines naming their `custom_id`: from its
    responses file (`file_content`, downloaded), from its inline responses, or from
    Vertex AI's `predictions.jsonl`."""
    out: list[bytes] = []
    if file_content is not None:
        for raw in file_content.splitlines():
            if raw.strip():
                row = pydantic_core.from_json(raw)
                if isinstance(row, dict):
                    out.append(_named(row))
        return b"".join(line + b"\n" for line in out)
    batch = _batch(resource)
    output = batch.get("output") or {}
    inlined = (output.get("inlinedResponses") or {}).get("inlinedResponses") or []
    for item in inlined:
        key = (item.get("metadata") or {}).get("key")
        row = {"key": key, **{k: v for k, v in item.items() if k in ("response", "error")}}
        out.append(_named(row))
    return b"".join(line + b"\n" for line in out)


def _batch(resource: dict[str, Any]) -> dict[str, Any]:
    """The batch itself: an operation's `metadata` (Gemini API), else the resource."""
    metadata = resource.get("metadata")
    return metadata if isinstance(metadata, dict) else resource


def _named(row: dict[str, Any]) -> bytes:
    """A result row with its `custom_id`: the Gemini API's `key`, or the label Vertex
    echoes back in the row's `request`."""
    custom_id = row.get("key")
    if custom_id is None:
        labels = (row.get("request") or {}).get("labels") or {}
        custom_id = labels.get(KEY_LABEL)
    return pydantic_core.to_json({"custom_id": custom_id, **row})


def read_line(line: bytes, batch_status: str | None = None) -> LineResult:
    """One result line (as `results` wrote it) into a `LineResult`: the response body,
    or the typed error an online call would have raised (a Vertex AI row's `status`
    text, a Gemini API row's Google error); a line of a cancelled or expired batch
    with neither was not answered."""
    row = pydantic_core.from_json(line)
    if not isinstance(row, dict):
        raise ValueError("a batch result line is not a JSON object")
    custom_id = str(row.get("custom_id"))
    response, error = row.get("response"), row.get("error")
    status_text = row.get("status")
    if isinstance(response, dict) and not status_text:
        return LineResult(custom_id, "succeeded", body=response)
    if isinstance(error, dict):
        code = error.get("code")
        failure = error_from_body({"error": error}, status=code if isinstance(code, int) else None)
        return LineResult(custom_id, "errored", error=failure)
    if isinstance(status_text, str) and status_text:
        code = 400 if status_text.startswith("Bad Request") else 500
        failure = error_from_body({"error": {"code": code, "message": status_text}}, status=code)
        return LineResult(custom_id, "errored", error=failure)
    suffix = (batch_status or "").rsplit("_", 1)[-1]
    outcome = _UNANSWERED.get(suffix, "expired")
    return LineResult(custom_id, "expired" if outcome == "expired" else "cancelled")


def _time(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None

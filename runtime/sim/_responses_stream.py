"""The SSE events of a streamed Responses reply, as the official SDK reads them."""

from __future__ import annotations

import copy
from typing import Any

from pydantic_core import to_json

from ._tokens import count_tokens, stream_pieces
from ._types import Plan, SSEStream


class _Events:
    def __init__(self) -> None:
        self.events: list[bytes] = []
        self.tokens: list[int] = []

    def add(self, kind: str, data: dict[str, Any], piece: str = "") -> None:
        event = {"type": kind, "sequence_number": len(self.events), **data}
        self.events.append(b"event: " + kind.encode() + b"\ndata: " + to_json(event) + b"\n\n")
        self.tokens.append(count_tokens(piece))


def stream_events(plan: Plan, final: dict[str, Any], items: list[dict[str, Any]]) -> SSEStream:
    """created, in_progress, each output item's events, then completed (or incomplete)."""
    out = _Events()
    start = copy.copy(final)
    start.update(status="in_progress", output=[], usage=None, completed_at=None)
    start["incomplete_details"] = None
    out.add("response.created", {"response": start})
    out.add("response.in_progress", {"response": start})
    for index, item in enumerate(items):
        kind = item["type"]
        if kind == "reasoning":
            _reasoning(out, index, item)
        elif kind == "message":
            _message(out, index, item)
        elif kind == "function_call":
            _call(out, index, item)
        else:
            _builtin(out, index, item)
    body_end = len(out.events)
    done = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    out.add(done, {"response": final})
    return SSEStream(out.events, out.tokens, body_end)


def _reasoning(out: _Events, index: int, item: dict[str, Any]) -> None:
    at = {"item_id": item["id"], "output_index": index}
    out.add("response.output_item.added", {"output_index": index, "item": {**item, "summary": []}})
    for n, part in enumerate(item["summary"]):
        empty = {"type": "summary_text", "text": ""}
        out.add("response.reasoning_summary_part.added", {**at, "summary_index": n, "part": empty})
        for piece in stream_pieces(part["text"]):
            delta = {**at, "summary_index": n, "delta": piece}
            out.add("response.reasoning_summary_text.delta", delta, piece)
        text = {**at, "summary_index": n, "text": part["text"]}
        out.add("response.reasoning_summary_text.done", text)
        out.add("response.reasoning_summary_part.done", {**at, "summary_index": n, "part": part})
    out.add("response.output_item.done", {"output_index": index, "item": item})


def _message(out: _Events, index: int, item: dict[str, Any]) -> None:
    at = {"item_id": item["id"], "output_index": index}
    added = {**item, "status": "in_progress", "content": []}
    out.add("response.output_item.added", {"output_index": index, "item": added})
    for n, part in enumerate(item["content"]):
        here = {**at, "content_index": n}
        if part["type"] == "refusal":
            out.add("response.content_part.added", {**here, "part": {**part, "refusal": ""}})
            for piece in stream_pieces(part["refusal"]):
                out.add("response.refusal.delta", {**here, "delta": piece}, piece)
            out.add("response.refusal.done", {**here, "refusal": part["refusal"]})
        else:
            start = {**part, "text": "", "annotations": []}
            out.add("response.content_part.added", {**here, "part": start})
            for piece in stream_pieces(part["text"]):
                delta = {**here, "delta": piece, "logprobs": []}
                out.add("response.output_text.delta", delta, piece)
            for n_note, note in enumerate(part["annotations"]):
                added = {**here, "annotation_index": n_note, "annotation": note}
                out.add("response.output_text.annotation.added", added)
            done = {**here, "text": part["text"], "logprobs": []}
            out.add("response.output_text.done", done)
        out.add("response.content_part.done", {**here, "part": part})
    out.add("response.output_item.done", {"output_index": index, "item": item})


def _call(out: _Events, index: int, item: dict[str, Any]) -> None:
    at = {"item_id": item["id"], "output_index": index}
    added = {**item, "status": "in_progress", "arguments": ""}
    out.add("response.output_item.added", {"output_index": index, "item": added})
    for piece in stream_pieces(item["arguments"]):
        out.add("response.function_call_arguments.delta", {**at, "delta": piece}, piece)
    done = {**at, "arguments": item["arguments"]}
    out.add("response.function_call_arguments.done", done)
    out.add("response.output_item.done", {"output_index": index, "item": item})


def _builtin(out: _Events, index: int, item: dict[str, Any]) -> None:
    """A built-in tool call: added in progress, the tool's own events, done."""
    at = {"item_id": item["id"], "output_index": index}
    kind = item["type"]
    added = {**item, "status": "in_progress"}
    if kind == "mcp_call":
        added.update(arguments="", output=None)
    elif kind == "code_interpreter_call":
        added.update(code="", outputs=None)
    out.add("response.output_item.added", {"output_index": index, "item": added})
    if kind == "web_search_call":
        for step in ("in_progress", "searching", "completed"):
            out.add(f"response.web_search_call.{step}", at)
    elif kind == "mcp_call":
        out.add("response.mcp_call.in_progress", at)
        for piece in stream_pieces(item["arguments"]):
            out.add("response.mcp_call_arguments.delta", {**at, "delta": piece}, piece)
        out.add("response.mcp_call_arguments.done", {**at, "arguments": item["arguments"]})
        out.add("response.mcp_call.completed", at)
    elif kind == "code_interpreter_call":
        out.add("response.code_interpreter_call.in_progress", at)
        for piece in stream_pieces(item["code"]):
            out.add("response.code_interpreter_call_code.delta", {**at, "delta": piece}, piece)
        out.add("response.code_interpreter_call_code.done", {**at, "code": item["code"]})
        out.add("response.code_interpreter_call.interpreting", at)
        out.add("response.code_interpreter_call.completed", at)
    out.add("response.output_item.done", {"output_index": index, "item": item})

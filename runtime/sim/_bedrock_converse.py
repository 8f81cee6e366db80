"""The Bedrock Converse wire: reply bodies, ConverseStream's binary event stream, and
errors as Bedrock sends them (the type in ``x-amzn-ErrorType``, a JSON ``message``).

Stop reasons: a reply ends ``end_turn``, ``tool_use`` or ``max_tokens``; ``stop_sequence``
when its text holds one of the request's ``stopSequences`` (cut before it); a refused
reply (``Reply(refusal=...)``, the ``refusal`` fault, ``finish="content_filter"``) ends
``guardrail_intervened`` when the request names a guardrail (its text the guardrail's
message, with the guardrail's ``trace`` when the request enables it), else
``content_filtered``. Usage names cache reads and writes when the request marked a
``cachePoint``; the reply names its ``serviceTier`` when the request asked for one.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Final

from pydantic_core import from_json, to_json
from typing_extensions import Unpack

from . import _bedrock_frames as frames
from ._bedrock_parse import BedrockRequest, parse_converse
from ._tokens import count_tokens, stream_pieces
from ._types import ErrorWhere, Finish, ParsedRequest, Plan, SSEStream

_STOP: dict[Finish, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "content_filtered",
    "pause_turn": "end_turn",
    "refusal": "content_filtered",
}
# Bedrock's error types by HTTP status, with the message each is sent with by default.
ERRORS: dict[int, tuple[str, str]] = {
    400: ("ValidationException", "Invalid request."),
    403: (
        "AccessDeniedException",
        "You don't have access to the model with the specified model ID.",
    ),
    404: ("ResourceNotFoundException", "The requested resource could not be found."),
    408: (
        "ModelTimeoutException",
        "Model has timed out in processing the request. Try your request again.",
    ),
    424: ("ModelErrorException", "The model returned an error."),
    429: ("ThrottlingException", "Too many requests, please wait before trying again."),
    500: ("InternalServerException", "The server encountered an internal error."),
    503: ("ServiceUnavailableException", "Bedrock is unable to process your request."),
}
# The exceptions ConverseStream's event union carries (the member names).
STREAM_EXCEPTIONS = (
    "internalServerException",
    "modelStreamErrorException",
    "validationException",
    "throttlingException",
    "serviceUnavailableException",
)
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")
_GUARDRAIL_ACTION = "Guardrail blocked."


def error_type(status: int) -> str:
    """The error type Bedrock answers `status` with."""
    if status in ERRORS:
        return ERRORS[status][0]
    return "InternalServerException" if status >= 500 else "ValidationException"


class BedrockWire:
    """Bedrock Converse (``POST /model/{modelId}/converse`` and ``converse-stream``).
    `model` is the model a body is parsed for when the URL does not say (a batch job's
    records)."""

    api: Final = "bedrock"
    tool_id_prefix: Final = "tooluse_"
    request_id_header: Final = "x-amzn-RequestId"
    response_id_prefix: Final = "bedrock-sim-"

    def __init__(self, model: str = "") -> None:
        self.model = model

    def parse(self, body: object) -> ParsedRequest:
        return parse_converse(body, model=self.model, stream=False)

    def api_key(self, headers: Mapping[str, str]) -> str | None:
        """The access key that signed the request (or its Bedrock API key): what rate
        limits are kept per."""
        auth = headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return auth[7:]
        found = _CREDENTIAL.search(auth)
        return found.group(1) if found else None

    def error(self, status: int, message: str | None = None, **where: Unpack[ErrorWhere]) -> bytes:
        default = ERRORS.get(status, (error_type(status), "An error occurred."))[1]
        return to_json({"message": message or default})

    def context_error(self, limit: int, tokens: int, *, request_id: str) -> bytes:
        return self.error(400, "Input is too long for requested model.", request_id=request_id)

    def stream_error(self, data: bytes) -> bytes:
        """An exception frame: the type a scripted body names in ``__type`` (a member
        of the stream's union, or an error type), else ``modelStreamErrorException``."""
        try:
            body = from_json(data)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            body = {"message": data.decode("utf-8", "replace")}
        kind = str(body.pop("__type", "") or "modelStreamErrorException")
        kind = kind[:1].lower() + kind[1:]
        return frames.exception(kind, body)

    def body(self, plan: Plan, req: ParsedRequest, response_id: str) -> bytes:
        plan, stop = _resolved(plan, req)
        content = [] if plan.empty else [block for block, _ in _blocks(plan)]
        reply: dict[str, Any] = {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": stop,
            "usage": _usage(plan, req),
            "metrics": {"latencyMs": _latency(plan)},
        }
        reply.update(_extras(req, stop, plan))
        return to_json(reply)

    def stream(self, plan: Plan, req: ParsedRequest, response_id: str) -> SSEStream:
        plan, stop = _resolved(plan, req)
        events: list[bytes] = [frames.event("messageStart", {"role": "assistant"})]
        tokens = [0]

        def add(kind: str, data: dict[str, Any], piece: str = "") -> None:
            events.append(frames.event(kind, data))
            tokens.append(count_tokens(piece))

        if not plan.empty:
            for index, (block, arguments) in enumerate(_blocks(plan)):
                _stream_block(add, index, block, arguments)
        body_end = len(events)
        add("messageStop", {"stopReason": stop})
        metadata = {"usage": _usage(plan, req), "metrics": {"latencyMs": _latency(plan)}}
        metadata.update(_extras(req, stop, plan))
        add("metadata", metadata)
        return SSEStream(events, tokens, body_end, content_type=frames.CONTENT_TYPE)


def _resolved(plan: Plan, req: ParsedRequest) -> tuple[Plan, str]:
    """The plan as Bedrock ends it: cut at a stop sequence, and its stop reason."""
    stop = _STOP[plan.finish]
    if stop == "content_filtered" and isinstance(req, BedrockRequest) and req.guardrail:
        stop = "guardrail_intervened"
    sequences = req.stop_sequences if isinstance(req, BedrockRequest) else []
    text = plan.text
    if text is not None and sequences and plan.finish in ("stop", "length"):
        at = min((i for i in (text.find(s) for s in sequences) if i >= 0), default=-1)
        if at >= 0:
            kept = text[:at] or None
            output = plan.output_tokens - count_tokens(text) + count_tokens(kept or "")
            plan = dataclasses.replace(plan, text=kept, output_tokens=output, finish="stop")
            stop = "stop_sequence"
    return plan, stop


def _extras(req: ParsedRequest, stop: str, plan: Plan) -> dict[str, Any]:
    extras: dict[str, Any] = {}
    if isinstance(req, BedrockRequest) and req.service_tier is not None:
        extras["serviceTier"] = {"type": req.served_tier or req.service_tier}
    if stop == "guardrail_intervened" and isinstance(req, BedrockRequest) and req.guardrail_trace:
        extras["trace"] = {"guardrail": _guardrail_trace(req, plan)}
    return extras


def _guardrail_trace(req: BedrockRequest, plan: Plan) -> dict[str, Any]:
    """What the guardrail assessed: the input blocked by its content policy."""
    assessment = {
        "contentPolicy": {
            "filters": [
                {
                    "type": "VIOLENCE",
                    "confidence": "HIGH",
                    "filterStrength": "HIGH",
                    "action": "BLOCKED",
                    "detected": True,
                }
            ]
        },
        "invocationMetrics": {"guardrailProcessingLatency": 1},
    }
    return {
        "modelOutput": [plan.refusal or plan.text or ""],
        "inputAssessment": {str(req.guardrail): assessment},
        "actionReason": _GUARDRAIL_ACTION,
    }


def _latency(plan: Plan) -> int:
    return 10 + plan.output_tokens  # deterministic; the real figure is Bedrock's own


def _usage(plan: Plan, req: ParsedRequest) -> dict[str, Any]:
    """Converse usage: `inputTokens` leaves out what was read from or written to cache."""
    read, written = plan.cache_read_tokens, plan.cache_write_tokens
    fresh = max(plan.input_tokens - read - written, 0)
    usage: dict[str, Any] = {
        "inputTokens": fresh,
        "outputTokens": plan.output_tokens,
        "totalTokens": fresh + plan.output_tokens + read + written,
    }
    if isinstance(req, BedrockRequest) and req.cache_points:
        usage["cacheReadInputTokens"] = read
        usage["cacheWriteInputTokens"] = written
        if written:
            ttl = "1h" if req.cache_ttl_1h else "5m"
            usage["cacheDetails"] = [{"ttl": ttl, "inputTokens": written}]
    return usage


def _blocks(plan: Plan) -> list[tuple[dict[str, Any], str | None]]:
    """The content blocks in order, each with its raw argument text (tool uses)."""
    blocks: list[tuple[dict[str, Any], str | None]] = []
    if plan.thinking is not None:
        reasoning = {"text": plan.thinking, "signature": plan.thinking_signature or ""}
        blocks.append(({"reasoningContent": {"reasoningText": reasoning}}, None))
    if plan.redacted_thinking is not None:
        data = base64.b64encode(plan.redacted_thinking.encode()).decode()
        blocks.append(({"reasoningContent": {"redactedContent": data}}, None))
    text = plan.refusal if plan.refusal is not None else plan.text
    if text is not None:
        blocks.append(({"text": text}, None))
    for call in plan.tool_calls:
        use = {"toolUseId": call.id, "name": call.name, "input": _tool_input(call.arguments)}
        blocks.append(({"toolUse": use}, call.arguments))
    return blocks


def _tool_input(arguments: str) -> Any:
    """The parsed arguments; text that is not a JSON object (malformed arguments, a
    ``maxTokens`` cut) goes as a JSON string, a valid Document."""
    try:
        value = from_json(arguments)
    except ValueError:
        return arguments
    return value if isinstance(value, dict) else arguments


def _stream_block(add: Any, index: int, block: dict[str, Any], arguments: str | None) -> None:
    """A block as ConverseStream sends it: a start only for tool uses, deltas, a stop."""
    at = {"contentBlockIndex": index}
    if "text" in block:
        for piece in stream_pieces(block["text"]):
            add("contentBlockDelta", {"delta": {"text": piece}, **at}, piece)
    elif "toolUse" in block:
        use = block["toolUse"]
        start = {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}
        add("contentBlockStart", {"start": start, **at})
        for piece in stream_pieces(arguments or "") or [""]:
            add("contentBlockDelta", {"delta": {"toolUse": {"input": piece}}, **at}, piece)
    else:
        reasoning = block["reasoningContent"]
        if "redactedContent" in reasoning:
            delta = {"reasoningContent": {"redactedContent": reasoning["redactedContent"]}}
            add("contentBlockDelta", {"delta": delta, **at})
        else:
            text = reasoning["reasoningText"]
            for piece in stream_pieces(text["text"]):
                delta = {"reasoningContent": {"text": piece}}
                add("contentBlockDelta", {"delta": delta, **at}, piece)
            signature = {"reasoningContent": {"signature": text["signature"]}}
            add("contentBlockDelta", {"delta": signature, **at})
    add("contentBlockStop", at)

"""Reading Bedrock's Converse replies, with no HTTP: content, tool calls by id,
reasoning kept verbatim, stop reasons as raygent's finish reasons and typed errors,
usage and prices, Bedrock's error replies as raygent's errors, ConverseStream's events
as raygent's chunks, and batch inference's output lines. `_bedrock_wire` re-exports
all of it beside the request side."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import (
    AuthenticationError,
    ContentFilterError,
    ContextLengthExceededError,
    GuardrailInterventionError,
    InvalidRequestError,
    ProviderError,
    ProviderResponseError,
    ProviderTimeoutError,
    RateLimitError,
    ServerError,
    redact,
)
from ..messages import ContentPart, ProviderBlock, TextPart, ToolCall
from ..pricing import Pricing, price_usage
from ..usage import Usage
from . import _anthropic_wire as anthropic
from ._aws import StreamEvent
from .contract import (
    Done,
    FinishReason,
    ModelResponse,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
)

PROVIDER = "bedrock"
PRICES_PROVIDER = "aws"  # genai-prices' provider id for Bedrock's model ids

FINISH_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "guardrail_intervened": "refusal",
    "content_filtered": "refusal",
    "model_context_window_exceeded": "context_exceeded",
    "malformed_model_output": "error",
    "malformed_tool_use": "error",
}

# --- replies ----------------------------------------------------------------------


def _bad(what: str) -> ProviderResponseError:
    return ProviderResponseError(f"bedrock: malformed reply: {what}", provider=PROVIDER)


def finish_reason(stop_reason: str | None) -> FinishReason:
    """Bedrock's stop reason as raygent's (an unknown one is an error)."""
    if stop_reason is None:
        return "stop"
    return FINISH_REASONS.get(stop_reason, "error")


def usage_from(raw: Any) -> Usage:
    """Converse usage: `inputTokens` leaves out cache reads and writes."""
    if raw is None:
        return Usage(requests=1, input_includes_cache=False)
    if not isinstance(raw, dict):
        raise _bad("usage is not an object")

    def count(key: str) -> int:
        value = raw.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _bad(f"usage.{key} is not a count")
        return value

    details = raw.get("cacheDetails") or []
    long_writes = sum(
        int(d.get("inputTokens") or 0)
        for d in details
        if isinstance(d, dict) and d.get("ttl") == "1h"
    )
    return Usage(
        requests=1,
        input_tokens=count("inputTokens"),
        output_tokens=count("outputTokens"),
        cached_tokens=count("cacheReadInputTokens"),
        cache_write_tokens=count("cacheWriteInputTokens"),
        cache_write_1h_tokens=long_writes,
        input_includes_cache=False,
    )


def _content(blocks: Any) -> tuple[list[ContentPart], list[ToolCall]]:
    if not isinstance(blocks, list):
        raise _bad("output.message.content is not a list")
    content: list[ContentPart] = []
    calls: list[ToolCall] = []
    for block in blocks:
        if not isinstance(block, dict) or len(block) != 1:
            raise _bad("a content block is not an object with one member")
        kind, value = next(iter(block.items()))
        if kind == "text":
            if not isinstance(value, str):
                raise _bad("a text block is not a string")
            content.append(TextPart(text=value))
        elif kind == "toolUse":
            calls.append(_tool_call(value))
        else:
            if kind == "reasoningContent":
                _check_reasoning(value)
            content.append(ProviderBlock(provider=PROVIDER, kind=kind, data=block))
    return content, calls


def _tool_call(value: Any) -> ToolCall:
    if not isinstance(value, dict):
        raise _bad("toolUse is not an object")
    call_id, name = value.get("toolUseId"), value.get("name")
    if not isinstance(call_id, str) or not isinstance(name, str) or "input" not in value:
        raise _bad("toolUse without toolUseId, name or input")
    raw = value["input"]
    return ToolCall.parse(call_id, name, raw if isinstance(raw, str) else json.dumps(raw))


def _check_reasoning(value: Any) -> None:
    text = value.get("reasoningText") if isinstance(value, dict) else None
    redacted = value.get("redactedContent") if isinstance(value, dict) else None
    if isinstance(text, dict) and isinstance(text.get("text"), str):
        return
    if isinstance(redacted, str):
        return
    raise _bad("reasoningContent holds neither reasoningText nor redactedContent")


@dataclass(frozen=True)
class Reply:
    """A Converse reply read: the response (usage not yet priced), Bedrock's own stop
    reason and the guardrail's trace when it sent one."""

    response: ModelResponse
    stop_reason: str
    trace: dict[str, Any] | None


def _served_tier(raw: Any) -> str | None:
    kind = raw.get("type") if isinstance(raw, dict) else None
    return kind if isinstance(kind, str) else None


def read_reply(data: Any, *, model: str | None = None) -> Reply:
    """A Converse reply (ProviderResponseError when its shape is not Converse's)."""
    if not isinstance(data, dict):
        raise _bad("not a JSON object")
    output = data.get("output")
    message = output.get("message") if isinstance(output, dict) else None
    if not isinstance(message, dict):
        raise _bad("no output.message")
    stop = data.get("stopReason")
    if not isinstance(stop, str):
        raise _bad("no stopReason")
    content, calls = _content(message.get("content"))
    finish = finish_reason(stop)
    trace = data.get("trace") if isinstance(data.get("trace"), dict) else None
    refused = "".join(p.text for p in content if isinstance(p, TextPart)) or stop
    response = ModelResponse(
        content=content,
        tool_calls=calls,
        finish_reason=finish,
        usage=usage_from(data.get("usage")),
        model=model,
        provider=PROVIDER,
        refusal=refused if finish == "refusal" else None,
        service_tier=_served_tier(data.get("serviceTier")),
    )
    return Reply(response, stop, trace)


def stop_error(reply: Reply) -> ProviderError | None:
    """The typed error a reply's stop reason stands for: a guardrail's intervention
    (`GuardrailInterventionError`, with the guardrail and its reason), content filtered
    (`ContentFilterError`), a malformed model output; None for a reply that ended well."""
    stop, text = reply.stop_reason, reply.response.text
    if stop == "guardrail_intervened":
        guardrail = (reply.trace or {}).get("guardrail") or {}
        assessed = guardrail.get("inputAssessment") or guardrail.get("outputAssessments") or {}
        return GuardrailInterventionError(
            f"bedrock: a guardrail intervened: {text or 'no message'}",
            provider=PROVIDER,
            guardrail=next(iter(assessed), None),
            action_reason=guardrail.get("actionReason"),
            output=text,
        )
    if stop == "content_filtered":
        return ContentFilterError(f"bedrock: content filtered: {text}", provider=PROVIDER)
    if stop in ("malformed_model_output", "malformed_tool_use"):
        return ProviderResponseError(f"bedrock: {stop}", provider=PROVIDER, provider_code=stop)
    return None


def price(
    usage: Usage,
    model_id: str,
    *,
    declared: Pricing | None = None,
    batch: bool = False,
    tier: str | None = None,
) -> Usage:
    """`usage` priced: declared pricing, else genai-prices' Bedrock prices (its `aws`
    provider knows foundation model ids, inference profiles and ARNs holding them);
    `batch` at batch inference's rates (half the on-demand ones where genai-prices has
    none), `tier` "flex" or "priority" at that tier's (see `raygent.pricing`)."""
    served = None if tier in (None, "default", "reserved") else tier
    return price_usage(
        usage,
        provider=PRICES_PROVIDER,
        model=model_id,
        declared=declared,
        batch=batch,
        tier=served,
    )


# --- errors -----------------------------------------------------------------------

_AUTH = frozenset(
    {
        "AccessDeniedException",
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "IncompleteSignatureException",
        "MissingAuthenticationTokenException",
        "ExpiredTokenException",
        "SignatureDoesNotMatch",
    }
)
_SERVER = frozenset(
    {
        "ServiceUnavailableException",
        "ModelNotReadyException",
        "InternalServerException",
        "ModelErrorException",
        "ModelStreamErrorException",
    }
)
_CONTEXT_HINTS = ("too long", "context window", "too many tokens", "context length")


def _error_code(headers: Mapping[str, str], body: Any) -> str | None:
    given = headers.get("x-amzn-ErrorType") or headers.get("x-amzn-errortype")
    if not given and isinstance(body, dict):
        given = body.get("__type") or body.get("code")
    if not isinstance(given, str) or not given:
        return None
    return given.split(":", 1)[0].rsplit("#", 1)[-1]


def error_from(
    status: int | None,
    headers: Mapping[str, str],
    body: bytes,
    *,
    secrets: tuple[str, ...] = (),
) -> ProviderError:
    """Bedrock's error reply (its type in `x-amzn-ErrorType` or the body's `__type`, its
    `message`) as raygent's typed error; `status` None for an exception inside a stream.
    `ThrottlingException` is a `RateLimitError`; `ServiceUnavailableException`,
    `ModelNotReadyException` and the model's and server's errors retryable
    `ServerError`s; `ValidationException` an invalid request (its context-length
    messages `ContextLengthExceededError`); signature and access errors
    `AuthenticationError`s; `ModelTimeoutException` a `ProviderTimeoutError`."""
    try:
        parsed: Any = json.loads(body) if body else None
    except ValueError:
        parsed = None
    code = _error_code(headers, parsed)
    if code is not None:
        code = code[:1].upper() + code[1:]  # a stream's exception names its union member
    message = parsed.get("message") if isinstance(parsed, dict) else None
    if not isinstance(message, str):
        message = body.decode("utf-8", "replace")[:500] if parsed is None else ""
    message = redact(message, secrets)[:2000]
    request_id = headers.get("x-amzn-RequestId") or headers.get("x-amzn-requestid")
    details: dict[str, Any] = {
        "provider": PROVIDER,
        "status": status,
        "provider_code": code,
        "request_id": request_id,
    }
    text = f"bedrock {code or status}: {message}"
    return _typed(code, status, message, text, details)


def _typed(
    code: str | None, status: int | None, message: str, text: str, details: dict[str, Any]
) -> ProviderError:
    if code == "ThrottlingException":
        return RateLimitError(text, retry_after=None, **details)
    if code == "ServiceQuotaExceededException":
        return RateLimitError(text, retryable=False, retry_after=None, **details)
    if code in _SERVER:
        return ServerError(text, **details)
    if code in _AUTH:
        return AuthenticationError(text, **details)
    if code == "ModelTimeoutException":
        return ProviderTimeoutError(text, **details)
    if code in ("ValidationException", "SerializationException", None) and any(
        h in message.lower() for h in _CONTEXT_HINTS
    ):
        return ContextLengthExceededError(text, **details)
    if code is not None or status is None:
        return InvalidRequestError(text, **details) if code else ServerError(text, **details)
    if status == 429:
        return RateLimitError(text, retry_after=None, **details)
    if status in (401, 403):
        return AuthenticationError(text, **details)
    if status >= 500:
        return ServerError(text, **details)
    return InvalidRequestError(text, **details)


# --- streams ----------------------------------------------------------------------


@dataclass
class StreamState:
    """ConverseStream's events turned into raygent's chunks, and the final reply.
    `feed` each decoded event (`_aws.iter_event_stream`); an exception inside the
    stream raises its typed error; `done()` gives the reply once `messageStop` and
    `metadata` came (ProviderResponseError if the stream ended before)."""

    model: str | None = None
    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    stop_reason: str | None = None
    usage: Usage | None = None
    service_tier: str | None = None
    trace: dict[str, Any] | None = None
    price: Callable[[Usage, str | None], Usage] = field(default=lambda usage, tier: usage)

    @property
    def complete(self) -> bool:
        return self.stop_reason is not None and self.usage is not None

    def feed(self, event: StreamEvent) -> list[StreamChunk]:
        if event.message_type != "event":
            raise error_from(None, {"x-amzn-ErrorType": event.kind}, event.payload)
        try:
            data = json.loads(event.payload) if event.payload else {}
            if not isinstance(data, dict):
                raise TypeError("an event that is not a JSON object")
            return self._event(event.kind, data)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise _bad(f"{event.kind} event: {exc}") from None

    def _event(self, kind: str, data: dict[str, Any]) -> list[StreamChunk]:
        if kind == "contentBlockStart":
            start = data["start"]
            use = start.get("toolUse")
            if use is not None:
                block = {"toolUseId": str(use["toolUseId"]), "name": str(use["name"])}
                self.blocks[int(data["contentBlockIndex"])] = {"toolUse": {**block, "input": ""}}
            return []
        if kind == "contentBlockDelta":
            return self._delta(int(data["contentBlockIndex"]), data["delta"])
        if kind == "messageStop":
            self.stop_reason = str(data["stopReason"])
            return []
        if kind == "metadata":
            self.usage = usage_from(data["usage"])
            self.service_tier = _served_tier(data.get("serviceTier")) or self.service_tier
            self.trace = data.get("trace") if isinstance(data.get("trace"), dict) else None
            return [UsageChunk(self.price(self.usage, self.service_tier))]
        return []  # messageStart, contentBlockStop

    def _delta(self, index: int, delta: dict[str, Any]) -> list[StreamChunk]:
        if "text" in delta:
            piece = _string(delta["text"])
            block = self.blocks.setdefault(index, {"text": ""})
            block["text"] += piece
            return [TextDelta(piece)]
        if "toolUse" in delta:
            use = self.blocks[index]["toolUse"]
            piece = _string(delta["toolUse"]["input"])
            use["input"] += piece
            return [ToolCallDelta(index, use["toolUseId"], use["name"], piece)]
        if "reasoningContent" in delta:
            return self._reasoning(index, delta["reasoningContent"])
        return []  # citations and other deltas raygent keeps no part for

    def _reasoning(self, index: int, delta: dict[str, Any]) -> list[StreamChunk]:
        block = self.blocks.setdefault(index, {"reasoningContent": {}})["reasoningContent"]
        if "redactedContent" in delta:
            block["redactedContent"] = _string(delta["redactedContent"])
            return []
        text = block.setdefault("reasoningText", {"text": ""})
        if "signature" in delta:
            text["signature"] = _string(delta["signature"])
            return []
        piece = _string(delta["text"])
        text["text"] += piece
        return [ReasoningDelta(piece)]

    def reply(self) -> Reply:
        """The whole reply, as `read_reply` reads a Converse body."""
        if not self.complete:
            raise ProviderResponseError(
                "bedrock: the stream ended before the reply was complete", provider=PROVIDER
            )
        blocks = [self._finished(self.blocks[i]) for i in sorted(self.blocks)]
        data: dict[str, Any] = {
            "output": {"message": {"role": "assistant", "content": blocks}},
            "stopReason": self.stop_reason,
        }
        if self.service_tier is not None:
            data["serviceTier"] = {"type": self.service_tier}
        if self.trace is not None:
            data["trace"] = self.trace
        reply = read_reply(data, model=self.model)
        priced = self.price(self.usage or Usage(), self.service_tier)
        return Reply(
            reply.response.model_copy(update={"usage": priced}), reply.stop_reason, self.trace
        )

    def done(self) -> Done:
        return Done(self.reply().response)

    @staticmethod
    def _finished(block: dict[str, Any]) -> dict[str, Any]:
        use = block.get("toolUse")
        if use is None:
            return block
        raw = use["input"]
        try:
            value = json.loads(raw) if raw.strip() else {}
        except ValueError:
            value = raw  # malformed arguments stay text: the loop reports them back
        return {"toolUse": {**use, "input": value}}


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, not {type(value).__name__}")
    return value


def read_batch_line(
    line: bytes | str, *, model: str | None = None
) -> tuple[str, ModelResponse | ProviderError]:
    """An output line of a job (`*.jsonl.out`): its record id, and its reply (a Converse
    `modelOutput`, or a Claude InvokeModel one) or the typed error of its `error`."""
    try:
        data = json.loads(line)
    except ValueError:
        raise _bad("a batch output line that is not JSON") from None
    record_id = data.get("recordId") if isinstance(data, dict) else None
    if not isinstance(record_id, str):
        raise _bad("a batch output line without recordId")
    error = data.get("error")
    if isinstance(error, dict):
        code = error.get("errorCode")
        body = json.dumps({"message": str(error.get("errorMessage") or "")}).encode()
        status = code if isinstance(code, int) else None
        return record_id, error_from(status or 500, {}, body)
    output = data.get("modelOutput")
    if isinstance(output, dict) and "output" in output:
        return record_id, read_reply(output, model=model).response
    if isinstance(output, dict) and "content" in output:
        return record_id, _claude_output(output, model)
    raise _bad("a batch output line with neither modelOutput nor error")


def _claude_output(output: dict[str, Any], model: str | None) -> ModelResponse:
    """A Claude InvokeModel output (the Messages reply) read as the Anthropic wire does."""
    try:
        content, calls = anthropic.content_from(output["content"])
    except (KeyError, TypeError, ValueError):
        raise _bad("a Claude modelOutput whose content is not Messages content") from None
    finish = anthropic.finish_reason(output.get("stop_reason"))
    blocks = [
        ProviderBlock(provider=PROVIDER, kind="reasoningContent", data=_reasoning_of(p.data))
        if isinstance(p, ProviderBlock) and p.kind == "thinking"
        else p
        for p in content
    ]
    return ModelResponse(
        content=blocks,
        tool_calls=calls,
        finish_reason=finish,
        usage=anthropic.usage_from(output.get("usage")),
        response_id=output.get("id"),
        model=model,
        provider=PROVIDER,
        refusal="refused" if finish == "refusal" else None,
    )


def _reasoning_of(thinking: dict[str, Any]) -> dict[str, Any]:
    """A Messages thinking block as Converse's reasoning block (sent back by Converse)."""
    text = {"text": thinking.get("thinking", ""), "signature": thinking.get("signature", "")}
    return {"reasoningContent": {"reasoningText": text}}

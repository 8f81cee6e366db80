"""Gemini replies read into raygent's values, with no HTTP: a `GenerateContentResponse`
(a `generateContent` reply or a batch line's `response`) into parts, calls, finish and
usage; `streamGenerateContent` events into raygent's chunks and the same reply. Thought
summaries, signatures and parts raygent has no type for become `ProviderBlock`s
(`_gemini_wire` says which, and sends them back).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any, NoReturn

from ..errors import (
    ContentBlockedError,
    InvalidRequestError,
    ProviderResponseError,
    RecitationError,
)
from ..messages import ContentPart, ProviderBlock, TextPart, ToolCall
from ..usage import Usage
from .contract import (
    FinishReason,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
)

PROVIDER = "gemini"

FINISH_REASONS: dict[str, FinishReason] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    # The per-request token limit was reached but the reply goes on: continued as a cut.
    "CONTINUATION": "length",
    "OTHER": "error",
    "FINISH_REASON_UNSPECIFIED": "error",
    "TOO_MANY_TOOL_CALLS": "error",
    "NO_IMAGE": "error",
    "IMAGE_OTHER": "error",
}
# Finish reasons that mean the reply was withheld by a safety system: a typed error.
BLOCKED = frozenset(
    {
        "SAFETY",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "MODEL_ARMOR",
        "LANGUAGE",
        "PUP_LIMITED_DISABLED",
        "ESCALATION",
    }
)
RECITED = frozenset({"RECITATION", "IMAGE_RECITATION"})
# The model produced a call the service could not parse: nothing usable, a retry may do.
MALFORMED = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "MALFORMED_RESPONSE"})


@dataclass
class Reply:
    """A reply read: raygent's parts and calls, the finish, the usage (unpriced), and
    what the reply says of itself (id, model version, the tier it was served at)."""

    content: list[ContentPart]
    tool_calls: list[ToolCall]
    finish_reason: FinishReason
    usage: Usage
    response_id: str | None
    model: str | None
    service_tier: str | None
    raw_finish: str | None = None

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


def usage_from(raw: object) -> Usage:
    """Gemini's `usageMetadata` as raygent's usage: input the prompt (cached content
    included) and the tool-use prompt; output the candidates and the thoughts."""
    if not isinstance(raw, dict):
        return Usage(requests=1)

    def count(key: str) -> int:
        value = raw.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            _malformed(f"usageMetadata.{key} is not a count")
        return value

    thoughts = count("thoughtsTokenCount")
    return Usage(
        requests=1,
        input_tokens=count("promptTokenCount") + count("toolUsePromptTokenCount"),
        output_tokens=count("candidatesTokenCount") + thoughts,
        cached_tokens=count("cachedContentTokenCount"),
        reasoning_tokens=thoughts,
        input_includes_cache=True,
    )


def served_tier(data: dict[str, Any], header: str | None = None) -> str | None:
    """The tier a reply says it was served at: the Gemini API's `x-gemini-service-tier`
    header (priority past its limit reads "standard"); Vertex AI's
    `usageMetadata.trafficType`. None when the reply says neither."""
    if header:
        return header.lower().removeprefix("service_tier_")
    usage = data.get("usageMetadata")
    traffic = usage.get("trafficType") if isinstance(usage, dict) else None
    if traffic == "ON_DEMAND_FLEX":
        return "flex"
    if traffic == "ON_DEMAND_PRIORITY":
        return "priority"
    return "standard" if isinstance(traffic, str) else None


def read_reply(data: object, *, tier_header: str | None = None) -> Reply:
    """A `GenerateContentResponse` (a `generateContent` reply, or a batch line's
    `response`). A blocked prompt, a withheld reply and a recitation raise their typed
    errors; a shape Gemini does not send raises `ProviderResponseError`."""
    if not isinstance(data, dict):
        _malformed("the reply is not a JSON object")
    blocked(data)
    candidates = data.get("candidates")
    if not isinstance(candidates, list) or not candidates:
        _malformed("the reply has no candidates and no promptFeedback.blockReason")
    candidate = candidates[0]
    if not isinstance(candidate, dict):
        _malformed("candidates[0] is not an object")
    raw_finish = candidate.get("finishReason")
    check_finish(raw_finish, candidate)
    parts = _candidate_parts(candidate)
    state = _Assembly(str(data.get("responseId") or ""))
    for part in parts:
        state.add(part)
    content, calls = state.result()
    return Reply(
        content=content,
        tool_calls=calls,
        finish_reason=finish_reason(raw_finish, bool(calls)),
        usage=usage_from(data.get("usageMetadata")),
        response_id=_str_or_none(data.get("responseId")),
        model=_str_or_none(data.get("modelVersion")),
        service_tier=served_tier(data, tier_header),
        raw_finish=raw_finish if isinstance(raw_finish, str) else None,
    )


def blocked(data: dict[str, Any]) -> None:
    """Raise when the prompt was blocked (`promptFeedback.blockReason`)."""
    feedback = data.get("promptFeedback")
    if not isinstance(feedback, dict) or not feedback.get("blockReason"):
        return
    reason = str(feedback["blockReason"])
    raise ContentBlockedError(
        f"gemini blocked the prompt ({reason})",
        provider=PROVIDER,
        status=None,
        blocked="prompt",
        reason=reason,
        safety_ratings=_blocking(feedback.get("safetyRatings")),
    )


def check_finish(raw: object, candidate: dict[str, Any]) -> None:
    """Raise the typed error of a finish reason that leaves nothing usable."""
    if raw in BLOCKED:
        raise ContentBlockedError(
            f"gemini withheld the reply ({raw})",
            provider=PROVIDER,
            status=None,
            blocked="reply",
            reason=raw,
            safety_ratings=_blocking(candidate.get("safetyRatings")),
        )
    if raw in RECITED:
        citations = candidate.get("citationMetadata")
        raise RecitationError(
            f"gemini stopped the reply: it recited a source ({raw})",
            provider=PROVIDER,
            status=None,
            reason=raw,
            citations=citations if isinstance(citations, dict) else None,
        )
    if raw in MALFORMED:
        message = candidate.get("finishMessage")
        raise ProviderResponseError(
            f"gemini could not use the model's output ({raw}): {message or 'no message'}",
            provider=PROVIDER,
            status=None,
            provider_code=raw,
        )
    if raw == "MISSING_THOUGHT_SIGNATURE":
        raise InvalidRequestError(
            "gemini refused the request: a function call went back without its thought signature",
            provider=PROVIDER,
            status=None,
            provider_code=raw,
        )


def finish_reason(raw: object, has_calls: bool) -> FinishReason:
    """A Gemini finish reason as raygent's (Gemini finishes a function call with STOP)."""
    if raw is None or raw == "STOP":
        return "tool_calls" if has_calls else "stop"
    return FINISH_REASONS.get(str(raw), "error")


def _blocking(ratings: object) -> list[dict[str, Any]] | None:
    if not isinstance(ratings, list):
        return None
    return [r for r in ratings if isinstance(r, dict) and r.get("blocked")] or None


def _candidate_parts(candidate: dict[str, Any]) -> list[dict[str, Any]]:
    content = candidate.get("content")
    if content is None:
        return []
    if not isinstance(content, dict):
        _malformed("candidate.content is not an object")
    parts = content.get("parts", [])
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        _malformed("candidate.content.parts is not a list of objects")
    return parts


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _malformed(what: str) -> NoReturn:
    raise ProviderResponseError(f"malformed gemini reply: {what}", provider=PROVIDER, status=None)


@dataclass
class _Assembly:
    """Parts as they come (whole, or streamed piece by piece) into raygent's content and
    calls: text runs joined, thoughts joined, each call whole."""

    response_id: str
    content: list[ContentPart] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    _text: list[str] = field(default_factory=list)
    _thought: list[str] = field(default_factory=list)
    _thought_extra: dict[str, Any] = field(default_factory=dict)

    def add(self, part: dict[str, Any]) -> list[StreamChunk]:
        signature = part.get("thoughtSignature")
        if signature is not None and not isinstance(signature, str):
            _malformed("thoughtSignature is not a string")
        if part.get("thought") and "text" in part:
            self._flush_text()
            self._thought.append(_text_of(part))
            self._thought_extra.update({k: v for k, v in part.items() if k != "text"})
            if signature is not None:
                self._flush_thought()
            return [ReasoningDelta(part["text"])] if part["text"] else []
        self._flush_thought()
        if "functionCall" in part:
            return [self._call(part)]
        if "text" in part and set(part) <= {"text", "thoughtSignature"}:
            text = _text_of(part)
            if text:
                self._text.append(text)
            if signature is not None:
                if self._text:
                    self._flush_text()
                    self.content.append(_block("signature", {"thoughtSignature": signature}))
                else:
                    self.content.append(_block("part", dict(part)))
            return [TextDelta(text)] if text else []
        self._flush_text()
        self.content.append(_block("part", dict(part)))
        return []

    def _call(self, part: dict[str, Any]) -> ToolCallDelta:
        self._flush_text()
        function = part["functionCall"]
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            _malformed("functionCall without a name")
        args = function.get("args", {})
        if not isinstance(args, dict):
            _malformed("functionCall.args is not an object")
        given = function.get("id")
        call_id = given if isinstance(given, str) and given else self._call_id(len(self.calls))
        text = json.dumps(args, ensure_ascii=False)
        self.calls.append(
            ToolCall(call_id=call_id, name=function["name"], arguments_text=text, arguments=args)
        )
        if "thoughtSignature" in part or call_id is not given:
            self.content.append(_block("function_call", {"call_id": call_id, "part": dict(part)}))
        return ToolCallDelta(len(self.calls) - 1, call_id, function["name"], text)

    def _call_id(self, index: int) -> str:
        """An id for a call Gemini gave none: stable for a reply (its response id and
        the call's place), unique across the conversation."""
        if not self.response_id:
            return f"gemini_{uuid.uuid4().hex[:16]}"
        digest = hashlib.sha256(f"{self.response_id}:{index}".encode()).hexdigest()[:16]
        return f"gemini_{digest}"

    def _flush_text(self) -> None:
        if self._text:
            self.content.append(TextPart(text="".join(self._text)))
            self._text = []

    def _flush_thought(self) -> None:
        if self._thought:
            data = {**self._thought_extra, "text": "".join(self._thought)}
            self.content.append(_block("thought", data))
            self._thought, self._thought_extra = [], {}

    def result(self) -> tuple[list[ContentPart], list[ToolCall]]:
        self._flush_thought()
        self._flush_text()
        return self.content, self.calls


def _text_of(part: dict[str, Any]) -> str:
    text = part.get("text")
    if not isinstance(text, str):
        _malformed("a text part whose text is not a string")
    return text


def _block(kind: str, data: dict[str, Any]) -> ProviderBlock:
    return ProviderBlock(provider=PROVIDER, kind=kind, data=data)


@dataclass
class StreamState:
    """`streamGenerateContent` (SSE) events into raygent's chunks and the final reply.
    Feed each event's JSON; `done` turns true at the chunk with the finish reason."""

    tier_header: str | None = None
    done: bool = False
    _assembly: _Assembly | None = None
    _last: dict[str, Any] = field(default_factory=dict)
    _finish: str | None = None

    def feed(self, data: object) -> list[StreamChunk]:
        """The chunks one event yields (raises as `read_reply` does)."""
        if not isinstance(data, dict):
            _malformed("a stream event that is not a JSON object")
        if "error" in data:
            from ._gemini_errors import error_from_body  # an error inside a 200 stream

            raise error_from_body(data, status=None)
        blocked(data)
        self._last = {**self._last, **{k: v for k, v in data.items() if k != "candidates"}}
        if self._assembly is None:
            self._assembly = _Assembly(str(data.get("responseId") or ""))
        out: list[StreamChunk] = []
        candidates = data.get("candidates") or []
        if not isinstance(candidates, list):
            _malformed("candidates is not a list")
        for candidate in candidates[:1]:
            if not isinstance(candidate, dict):
                _malformed("candidates[0] is not an object")
            for part in _candidate_parts(candidate):
                out.extend(self._assembly.add(part))
            raw = candidate.get("finishReason")
            if raw is not None:
                check_finish(raw, candidate)
                self._finish, self.done = str(raw), True
        if self.done:
            out.append(UsageChunk(usage_from(data.get("usageMetadata"))))
        return out

    def reply(self) -> Reply:
        """The whole reply once `done` (ProviderResponseError before: cut off)."""
        if not self.done or self._assembly is None:
            _malformed("the stream ended before a finish reason")
        assert self._assembly is not None
        content, calls = self._assembly.result()
        return Reply(
            content=content,
            tool_calls=calls,
            finish_reason=finish_reason(self._finish, bool(calls)),
            usage=usage_from(self._last.get("usageMetadata")),
            response_id=_str_or_none(self._last.get("responseId")),
            model=_str_or_none(self._last.get("modelVersion")),
            service_tier=served_tier(self._last, self.tier_header),
            raw_finish=self._finish,
        )

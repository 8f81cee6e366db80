"""The Gemini wire (the Gemini API and Vertex AI), with no HTTP: request bodies from
raygent's messages and options, replies and stream events read into raygent's parts,
calls, chunks and usage. Errors and prices are in `_gemini_errors`.

Provider-only data rides raygent's messages as `ProviderBlock`s (provider "gemini"),
each sent back verbatim, so a thought signature returns byte for byte:

- kind "thought": a thought-summary part (`thought: true`), as sent;
- kind "signature": `{"thoughtSignature": ...}`, the signature of the text part before it;
- kind "part": any other part kept whole (a signature on an empty text part, code
  execution, inline data the model produced);
- kind "function_call": `{"call_id", "part"}`, the `functionCall` part of a `ToolCall`
  when it carried a signature or came without an id (raygent made `call_id` up: the id is
  then not sent back, and its result goes by name and order).
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from ..errors import (
    ContentBlockedError,
    InvalidOptionsError,
    InvalidRequestError,
    ProviderResponseError,
    RecitationError,
)
from ..messages import (
    AssistantMessage,
    ContentPart,
    ImagePart,
    Message,
    ProviderBlock,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
)
from ..usage import Usage
from .contract import (
    Capabilities,
    FinishReason,
    ModelOptions,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    UsageChunk,
)
from .media import image_data, require_vision
from .tiers import body_tier

PROVIDER = "gemini"
TIERS = ("flex", "standard", "priority")
# Google's documented signature for a function call with none (a history from another
# provider or model): it skips the check rather than fail the request.
SKIP_SIGNATURE = "skip_thought_signature_validator"
_GEMINI_3 = re.compile(r"(^|/)gemini-3")
# responseJsonSchema / parametersJsonSchema (full JSON Schema: $ref, anyOf, ...) came with
# Gemini 2.5; earlier models take the OpenAPI subset (responseSchema / parameters).
_JSON_SCHEMA_MODELS = re.compile(r"(^|/)gemini-(2\.5|[3-9])")
_GEMINI_MODEL = re.compile(r"(^|/)gemini-")
_EFFORT_BUDGET = {"minimal": 512, "low": 2048, "medium": 8192, "high": 24576}
_EFFORT_LEVEL = {"minimal": "minimal", "low": "low", "medium": "medium", "high": "high"}

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


def json_schema_supported(model: str) -> bool:
    """Whether `model` takes full JSON Schema (`responseJsonSchema`,
    `parametersJsonSchema`): Gemini 2.5 and later, and any model not named gemini-*
    (a tuned or proxied name: the current API). Older Gemini models take the OpenAPI
    subset (`responseSchema`, `parameters`), converted here."""
    return bool(_JSON_SCHEMA_MODELS.search(model)) or not _GEMINI_MODEL.search(model)


def is_gemini_3(model: str) -> bool:
    """Gemini 3 and later: thinking levels, and thought signatures required back."""
    return bool(_GEMINI_3.search(model)) or bool(re.search(r"(^|/)gemini-[4-9]", model))


# ---------------------------------------------------------------------------- requests


def request_body(
    model: str,
    messages: Sequence[Message],
    options: ModelOptions,
    capabilities: Capabilities,
    *,
    cached_content: str | None = None,
    default_max_tokens: int | None = None,
) -> dict[str, Any]:
    """The JSON body of ``models/{model}:generateContent`` (and of a batch line's
    ``request``). `cached_content`: a ``cachedContents/...`` name the request reads; the
    system instruction, tools and tool config are then the cache's and are not sent
    (Gemini refuses them beside a cache)."""
    json_schema = json_schema_supported(model)
    contents = Contents(model, capabilities).build(messages)
    body: dict[str, Any] = {"contents": contents}
    system = [m.text for m in messages if isinstance(m, SystemMessage) and m.text]
    if system and cached_content is None:
        body["systemInstruction"] = {"parts": [{"text": text} for text in system]}
    if options.tools and capabilities.tools and cached_content is None:
        declarations = [_declaration(t, json_schema) for t in options.tools]
        body["tools"] = [{"functionDeclarations": declarations}]
        if options.tool_choice is not None:
            mode = {"auto": "AUTO", "required": "ANY", "none": "NONE"}[options.tool_choice]
            body["toolConfig"] = {"functionCallingConfig": {"mode": mode}}
    config = _generation_config(model, options, capabilities, json_schema, default_max_tokens)
    if config:
        body["generationConfig"] = config
    if cached_content is not None:
        body["cachedContent"] = cached_content
    tier = body_tier(options, None)
    if tier is not None:
        if tier not in TIERS:
            raise InvalidOptionsError(
                f"service_tier {tier!r} is not a Gemini tier: one of {', '.join(TIERS)}",
                service_tier=tier,
            )
        body["serviceTier"] = tier
    extra = dict(options.provider_options.get(PROVIDER, {}))
    if isinstance(extra.get("generationConfig"), dict):
        body["generationConfig"] = {**config, **extra.pop("generationConfig")}
    body.update(extra)
    return body


def _generation_config(
    model: str,
    options: ModelOptions,
    capabilities: Capabilities,
    json_schema: bool,
    default_max_tokens: int | None,
) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if options.temperature is not None and capabilities.temperature:
        config["temperature"] = options.temperature
    max_tokens = options.max_tokens or default_max_tokens
    if max_tokens is not None:
        config["maxOutputTokens"] = max_tokens
    schema = options.response_schema
    if schema is not None and capabilities.structured_output:
        config["responseMimeType"] = "application/json"
        if json_schema:
            config["responseJsonSchema"] = schema.json_schema
        else:
            config["responseSchema"] = openapi_schema(schema.json_schema)
    reasoning = options.reasoning
    if reasoning is not None and capabilities.reasoning:
        thinking: dict[str, Any] = {"includeThoughts": True}
        if reasoning.max_tokens is not None:
            thinking["thinkingBudget"] = reasoning.max_tokens
        elif is_gemini_3(model):
            thinking["thinkingLevel"] = _EFFORT_LEVEL[reasoning.effort or "high"]
        else:
            thinking["thinkingBudget"] = _EFFORT_BUDGET[reasoning.effort or "medium"]
        config["thinkingConfig"] = thinking
    return config


def _declaration(spec: ToolSpec, json_schema: bool) -> dict[str, Any]:
    declaration: dict[str, Any] = {"name": spec.name}
    if spec.description:
        declaration["description"] = spec.description
    if json_schema:
        declaration["parametersJsonSchema"] = spec.parameters
    else:
        declaration["parameters"] = openapi_schema(spec.parameters)
    return declaration


_OPENAPI_KEYS = frozenset(
    {
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "maxItems",
        "minItems",
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "example",
        "anyOf",
        "propertyOrdering",
        "default",
        "items",
        "minimum",
        "maximum",
    }
)


def openapi_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema as Gemini's OpenAPI subset (`responseSchema`, `parameters`): refs
    inlined, types upper-cased, a `["x", "null"]` type as `nullable`, a `const` as a
    one-value enum, keywords the subset lacks dropped."""
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    converted: dict[str, Any] = _openapi(schema, defs, 0)
    return converted


def _openapi(node: Any, defs: dict[str, Any], depth: int) -> Any:
    if not isinstance(node, dict):
        return node
    if depth > 32:
        raise InvalidRequestError(
            "the schema nests too deeply (or recursively) for Gemini's subset"
        )
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = defs.get(ref.rsplit("/", 1)[-1], {})
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    out: dict[str, Any] = {}
    kind = node.get("type")
    if isinstance(kind, list):
        rest = [k for k in kind if k != "null"]
        if len(rest) < len(kind):
            out["nullable"] = True
        kind = rest[0] if rest else "null"
    if isinstance(kind, str):
        out["type"] = kind.upper()
    if "const" in node:
        out["enum"] = [node["const"]]
    for key, value in node.items():
        if key not in _OPENAPI_KEYS or key == "type":
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {k: _openapi(v, defs, depth + 1) for k, v in value.items()}
        elif key == "items":
            out[key] = _openapi(value, defs, depth + 1)
        elif key == "anyOf" and isinstance(value, list):
            branches = [b for b in value if not (isinstance(b, dict) and b.get("type") == "null")]
            if len(branches) < len(value):
                out["nullable"] = True
            if len(branches) == 1:
                out.update(_openapi(branches[0], defs, depth + 1))
            else:
                out[key] = [_openapi(b, defs, depth + 1) for b in branches]
        else:
            out[key] = value
    if "enum" in out and "type" not in out:
        out["type"] = "STRING"
    return out


class Contents:
    """raygent's messages as Gemini `contents`: user and model turns alternating (a
    round's tool results in one user turn), every provider block of Gemini's sent back
    verbatim, and each call's id sent only when Gemini gave it."""

    def __init__(self, model: str, capabilities: Capabilities) -> None:
        self.model = model
        self.capabilities = capabilities
        self.names: dict[str, str] = {}  # call id -> function name
        self.unsent: set[str] = set()  # call ids raygent made up (Gemini gave none)

    def build(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        contents: list[dict[str, Any]] = []
        for message in messages:
            if isinstance(message, SystemMessage):
                continue
            if isinstance(message, AssistantMessage):
                role, parts = "model", self._model_parts(message)
            elif isinstance(message, ToolMessage):
                role, parts = "user", self._result_parts(message)
            else:
                role, parts = "user", [p for p in map(self._part, message.content) if p]
            if not parts:
                continue
            if contents and contents[-1]["role"] == role:
                contents[-1]["parts"].extend(parts)
            else:
                contents.append({"role": role, "parts": parts})
        return contents

    def _part(self, part: ContentPart) -> dict[str, Any] | None:
        if isinstance(part, TextPart):
            return {"text": part.text} if part.text else None
        if isinstance(part, ImagePart):
            require_vision(self.capabilities)
            inline = image_data(part)
            if inline is None:
                assert part.url is not None
                mime = part.media_type or mimetypes.guess_type(part.url)[0] or "image/jpeg"
                return {"fileData": {"mimeType": mime, "fileUri": part.url}}
            media_type, data = inline
            return {"inlineData": {"mimeType": media_type, "data": data}}
        if part.provider == PROVIDER and part.kind in ("thought", "part"):
            return dict(part.data)
        return None  # another provider's block, or one placed below

    def _model_parts(self, message: AssistantMessage) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        calls: dict[str, dict[str, Any]] = {}
        for item in message.content:
            if isinstance(item, ProviderBlock) and item.provider == PROVIDER:
                if item.kind == "signature":
                    signature = item.data.get("thoughtSignature")
                    if parts and "thoughtSignature" not in parts[-1]:
                        parts[-1] = {**parts[-1], "thoughtSignature": signature}
                    else:
                        parts.append({"text": "", "thoughtSignature": signature})
                    continue
                if item.kind == "function_call":
                    calls[str(item.data.get("call_id"))] = item.data
                    continue
            rendered = self._part(item)
            if rendered is not None:
                parts.append(rendered)
        first_call = True
        for call in message.tool_calls:
            self.names[call.call_id] = call.name
            kept = calls.get(call.call_id)
            part = kept.get("part") if kept is not None else None
            function = part.get("functionCall") if isinstance(part, dict) else None
            if (
                isinstance(part, dict)
                and isinstance(function, dict)
                and function.get("name") == call.name
            ):
                if "id" not in function:
                    self.unsent.add(call.call_id)
                parts.append(dict(part))
            else:
                fresh: dict[str, Any] = {
                    "functionCall": {
                        "id": call.call_id,
                        "name": call.name,
                        "args": call.arguments or {},
                    }
                }
                if first_call and is_gemini_3(self.model) and kept is None:
                    fresh["thoughtSignature"] = SKIP_SIGNATURE  # a call Gemini never signed
                parts.append(fresh)
            first_call = False
        return parts

    def _result_parts(self, message: ToolMessage) -> list[dict[str, Any]]:
        name = message.name or self.names.get(message.call_id) or message.call_id
        key = "error" if message.is_error else "result"
        result: dict[str, Any] = {"name": name, "response": {key: message.text}}
        if message.call_id not in self.unsent:
            result = {"id": message.call_id, **result}
        images = [
            p for p in (self._part(i) for i in message.content if isinstance(i, ImagePart)) if p
        ]
        return [{"functionResponse": result}, *images]


# ----------------------------------------------------------------------------- replies


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

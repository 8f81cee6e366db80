"""The Gemini wire (the Gemini API and Vertex AI), with no HTTP: request bodies from
raygent's messages and options, replies and stream events read into raygent's parts,
calls, chunks and usage (read in `_gemini_reply`, re-exported here). Errors are in
`_gemini_errors`, prices in `_gemini_prices`.

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

import mimetypes
import re
from collections.abc import Sequence
from typing import Any

from ..errors import (
    InvalidOptionsError,
    InvalidRequestError,
)
from ..messages import (
    AssistantMessage,
    ContentPart,
    ImagePart,
    Message,
    ProviderBlock,
    SystemMessage,
    TextPart,
    ToolMessage,
)
from ._gemini_reply import (
    BLOCKED,
    FINISH_REASONS,
    MALFORMED,
    PROVIDER,
    RECITED,
    Reply,
    StreamState,
    blocked,
    check_finish,
    finish_reason,
    read_reply,
    served_tier,
    usage_from,
)
from .contract import (
    Capabilities,
    ModelOptions,
    ToolSpec,
)
from .media import image_data, require_vision
from .tiers import body_tier

__all__ = [
    "BLOCKED",
    "FINISH_REASONS",
    "MALFORMED",
    "PROVIDER",
    "RECITED",
    "SKIP_SIGNATURE",
    "TIERS",
    "Contents",
    "Reply",
    "StreamState",
    "blocked",
    "check_finish",
    "finish_reason",
    "is_gemini_3",
    "json_schema_supported",
    "openapi_schema",
    "read_reply",
    "request_body",
    "served_tier",
    "usage_from",
]

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

"""The Bedrock Converse wire, with no HTTP: request bodies from raygent's messages and
options, batch inference's records, and (from `_bedrock_reply`, re-exported here)
replies and ConverseStream events read back, usage, prices and Bedrock's errors as
raygent's.

Reasoning: a Claude model's `reasoningContent` block (its text and signature, or its
redacted content) is kept as a `ProviderBlock(provider="bedrock",
kind="reasoningContent")` holding the block verbatim, and sent back unchanged (as the
Anthropic wire keeps `thinking`); other providers' blocks are not sent. Documents and
other Converse blocks raygent has no part for go in as such a block too
(`ProviderBlock("bedrock", "document", {"document": {...}})`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from ..errors import CapabilityError, InvalidRequestError
from ..messages import (
    AssistantMessage,
    ContentPart,
    ImagePart,
    Message,
    SystemMessage,
    TextPart,
    ToolMessage,
)
from . import _anthropic_wire as anthropic
from ._bedrock_reply import (
    PRICES_PROVIDER,
    PROVIDER,
    Reply,
    StreamState,
    error_from,
    finish_reason,
    price,
    read_batch_line,
    read_reply,
    stop_error,
    usage_from,
)
from .contract import CacheControl, Capabilities, ModelOptions, ToolSpec
from .media import image_data, require_vision
from .tiers import body_tier

__all__ = [
    "PRICES_PROVIDER",
    "PROVIDER",
    "Reply",
    "StreamState",
    "batch_record",
    "converse_path",
    "error_from",
    "finish_reason",
    "price",
    "read_batch_line",
    "read_reply",
    "request_body",
    "stop_error",
    "usage_from",
]

BEDROCK_ANTHROPIC_VERSION = "bedrock-2023-05-31"  # InvokeModel bodies of Claude models
TIERS = ("priority", "default", "flex", "reserved")
_IMAGE_FORMATS = {"image/png": "png", "image/jpeg": "jpeg", "image/jpg": "jpeg"}
_IMAGE_FORMATS.update({"image/gif": "gif", "image/webp": "webp"})
_MAX_CACHE_POINTS = 4
_EFFORT_BUDGET = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576}


def converse_path(model_id: str, *, stream: bool) -> str:
    """The path of Converse (or ConverseStream) for a model id, an inference profile's
    id or an ARN (encoded whole, as boto3 encodes the `modelId` label)."""
    return f"/model/{quote(model_id, safe='')}/converse" + ("-stream" if stream else "")


def _is_claude(model_id: str) -> bool:
    return "anthropic.claude" in model_id


# --- requests ---------------------------------------------------------------------


def request_body(
    model_id: str,
    messages: Sequence[Message],
    options: ModelOptions,
    capabilities: Capabilities,
    *,
    default_max_tokens: int | None = None,
    guardrail: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Converse body (the model id goes in the path, see `converse_path`).
    `guardrail`: a `guardrailConfig` ({"guardrailIdentifier", "guardrailVersion",
    "trace"}). `provider_options["bedrock"]` is merged in last."""
    system = [{"text": m.text} for m in messages if isinstance(m, SystemMessage) and m.text]
    turns, ends = _turns(messages, capabilities)
    body: dict[str, Any] = {"messages": turns}
    if system:
        body["system"] = system
    max_tokens = options.max_tokens or default_max_tokens
    thinking = _thinking(model_id, options, capabilities, max_tokens)
    if thinking is not None:
        max_tokens = max(max_tokens or 0, thinking["budget_tokens"] + 1024)
        body["additionalModelRequestFields"] = {"thinking": thinking}
    inference: dict[str, Any] = {}
    if max_tokens:
        inference["maxTokens"] = max_tokens
    if options.temperature is not None and capabilities.temperature and thinking is None:
        inference["temperature"] = options.temperature
    if inference:
        body["inferenceConfig"] = inference
    tools = _tool_config(options, capabilities, turns)
    if tools is not None:
        body["toolConfig"] = tools
    if options.response_schema is not None and capabilities.structured_output:
        schema = options.response_schema
        definition = {"schema": json.dumps(schema.json_schema), "name": schema.name}
        body["outputConfig"] = {
            "textFormat": {"type": "json_schema", "structure": {"jsonSchema": definition}}
        }
    if options.cache_control is not None and capabilities.prompt_caching:
        _mark_cache(body, options.cache_control, ends)
    tier = body_tier(options, None)
    if tier is not None:
        body["serviceTier"] = {"type": tier}
    if guardrail:
        body["guardrailConfig"] = dict(guardrail)
    body.update(options.provider_options.get(PROVIDER, {}))
    return body


def _thinking(
    model_id: str, options: ModelOptions, capabilities: Capabilities, max_tokens: int | None
) -> dict[str, Any] | None:
    """Claude's extended thinking, through `additionalModelRequestFields`."""
    reasoning = options.reasoning
    if reasoning is None or not capabilities.reasoning or not _is_claude(model_id):
        return None
    budget = reasoning.max_tokens or _EFFORT_BUDGET.get(reasoning.effort or "medium", 8192)
    budget = max(1024, budget if max_tokens is None else min(budget, max_tokens - 1))
    if max_tokens is not None and budget >= max_tokens:
        return None
    return {"type": "enabled", "budget_tokens": budget}


def _tool_spec(spec: ToolSpec) -> dict[str, Any]:
    inner: dict[str, Any] = {"name": spec.name, "inputSchema": {"json": spec.parameters}}
    if spec.description:
        inner["description"] = spec.description
    if spec.strict is not None:
        inner["strict"] = spec.strict
    return {"toolSpec": inner}


def _tool_config(
    options: ModelOptions, capabilities: Capabilities, turns: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The tools; Bedrock also wants a `toolConfig` whenever the conversation holds tool
    blocks, so the tools the history names are declared when the call gives none."""
    if options.tools and capabilities.tools:
        config: dict[str, Any] = {"tools": [_tool_spec(t) for t in options.tools]}
        if options.tool_choice == "auto":
            config["toolChoice"] = {"auto": {}}
        elif options.tool_choice == "required":
            config["toolChoice"] = {"any": {}}
        return config
    used = [b["toolUse"]["name"] for turn in turns for b in turn["content"] if "toolUse" in b]
    if not used:
        return None
    names = list(dict.fromkeys(used))
    return {"tools": [_tool_spec(ToolSpec(name=n)) for n in names]}


def _turns(
    messages: Sequence[Message], capabilities: Capabilities
) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]] | None]]:
    """Converse turns alternate: tool results ride in user turns, same-role turns merge.
    Also, for each of our messages, the content list its blocks went into (a cache
    point after them goes there), None for system messages."""
    turns: list[dict[str, Any]] = []
    ends: list[list[dict[str, Any]] | None] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            ends.append(None)
            continue
        role = "assistant" if isinstance(message, AssistantMessage) else "user"
        blocks = _blocks(message, capabilities)
        if not blocks:
            ends.append(None)
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
        ends.append(turns[-1]["content"])
    return turns, ends


def _blocks(message: Message, capabilities: Capabilities) -> list[dict[str, Any]]:
    if isinstance(message, ToolMessage):
        content = [b for b in (_part(p, capabilities) for p in message.content) if b]
        result: dict[str, Any] = {"toolUseId": message.call_id, "content": content}
        if message.is_error:
            result["status"] = "error"
        return [{"toolResult": result}]
    blocks = [b for b in (_part(p, capabilities) for p in message.content) if b is not None]
    if isinstance(message, AssistantMessage):
        blocks.extend(
            {"toolUse": {"toolUseId": c.call_id, "name": c.name, "input": c.arguments or {}}}
            for c in message.tool_calls
        )
    return blocks


def _part(part: ContentPart, capabilities: Capabilities) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"text": part.text} if part.text.strip() else None  # Bedrock refuses blanks
    if isinstance(part, ImagePart):
        require_vision(capabilities)
        return {"image": _image(part)}
    # Reasoning and documents go back verbatim; other providers' blocks cannot.
    return dict(part.data) if part.provider == PROVIDER else None


def _image(part: ImagePart) -> dict[str, Any]:
    """An image block: bytes (a local file, inline data, a data: URL) or an S3 location.
    Bedrock fetches no http(s) URL: such an image is refused here, before any request."""
    url = part.url
    if url is not None and url.startswith("s3://"):
        fmt = _image_format(part.media_type or _guess(url))
        return {"format": fmt, "source": {"s3Location": {"uri": url}}}
    if url is not None and url.startswith("data:"):
        head, _, data = url.partition(",")
        media_type = head[5:].split(";")[0]
        return {"format": _image_format(media_type), "source": {"bytes": data}}
    inline = image_data(part)
    if inline is None:
        raise InvalidRequestError(
            "Bedrock takes an image as bytes or an s3:// location, not a URL to fetch: "
            "load it first (raygent.attachments fetches under the outbound policy)",
            provider=PROVIDER,
        )
    media_type, data = inline
    return {"format": _image_format(media_type), "source": {"bytes": data}}


def _guess(url: str) -> str:
    ext = url.rsplit(".", 1)[-1].lower()
    return {"jpg": "image/jpeg"}.get(ext, f"image/{ext}")


def _image_format(media_type: str) -> str:
    fmt = _IMAGE_FORMATS.get(media_type.lower())
    if fmt is None:
        raise InvalidRequestError(
            f"Bedrock takes png, jpeg, gif and webp images, not {media_type}", provider=PROVIDER
        )
    return fmt


def _mark_cache(
    body: dict[str, Any], cache: CacheControl, ends: list[list[dict[str, Any]] | None]
) -> None:
    """`cachePoint` blocks where `cache` says (after the tools, the system blocks or a
    message's blocks), placed as the Anthropic wire places its breakpoints."""
    point: dict[str, Any] = {"type": "default"}
    if cache.ttl == "1h":
        point["ttl"] = "1h"
    tools = body.get("toolConfig", {}).get("tools")
    system = body.get("system")
    turns = [t["content"] for t in body["messages"]]
    if isinstance(cache.breakpoints, int):
        users = [t["content"] for t in body["messages"] if t["role"] == "user"]
        earlier = next((u for u in reversed(users) if turns and u is not turns[-1]), None)
        candidates = [turns[-1] if turns else None, system or tools, earlier, tools]
        count = cache.breakpoints
    else:
        candidates = [_named(point_name, tools, system, ends) for point_name in cache.breakpoints]
        count = _MAX_CACHE_POINTS
    chosen: list[list[dict[str, Any]]] = []
    for target in candidates:
        if target is not None and all(t is not target for t in chosen):
            chosen.append(target)
    for target in chosen[: min(count, _MAX_CACHE_POINTS)]:
        target.append({"cachePoint": dict(point)})


def _named(
    name: str | int,
    tools: list[dict[str, Any]] | None,
    system: list[dict[str, Any]] | None,
    ends: list[list[dict[str, Any]] | None],
) -> list[dict[str, Any]] | None:
    if name == "tools":
        return tools
    if name == "system":
        return system
    if name == "last_message":
        return next((e for e in reversed(ends) if e is not None), None)
    if isinstance(name, int) and -len(ends) <= name < len(ends):
        return ends[name]
    return None


# --- batch inference --------------------------------------------------------------


def batch_record(
    record_id: str,
    model_id: str,
    messages: Sequence[Message],
    options: ModelOptions,
    capabilities: Capabilities,
    *,
    invocation_type: str = "Converse",
    default_max_tokens: int = 4096,
) -> dict[str, Any]:
    """A batch inference job's record: `{"recordId", "modelInput"}`. With a job of
    `modelInvocationType="Converse"` (any model Converse serves) the input is the
    Converse body; with `"InvokeModel"` it is the model family's own body, which raygent
    writes for Anthropic Claude models (the Messages body with Bedrock's
    `anthropic_version`): CapabilityError for other families."""
    if invocation_type == "Converse":
        body = request_body(
            model_id, messages, options, capabilities, default_max_tokens=default_max_tokens
        )
        return {"recordId": record_id, "modelInput": body}
    if invocation_type != "InvokeModel" or not _is_claude(model_id):
        raise CapabilityError(
            f"raygent writes InvokeModel records for Anthropic Claude models only, not "
            f"{model_id}: use a Converse job",
            model=model_id,
            capability="batch_invoke_model",
        )
    body = anthropic.request_body(
        model_id,
        messages,
        options,
        capabilities,
        stream=False,
        default_max_tokens=default_max_tokens,
    )
    body.pop("model", None)
    body.pop("service_tier", None)
    body["anthropic_version"] = BEDROCK_ANTHROPIC_VERSION
    return {"recordId": record_id, "modelInput": body}

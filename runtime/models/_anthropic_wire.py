"""The Anthropic Messages wire format: request bodies, replies, stream assembly."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import CapabilityError
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
    CacheControl,
    Capabilities,
    FinishReason,
    ModelOptions,
    ServerCompaction,
    ToolSpec,
)
from .media import image_data, require_vision
from .tiers import body_tier

PROVIDER = "anthropic"
API_VERSION = "2023-06-01"
_UNCACHEABLE = ("thinking", "redacted_thinking")
COMPACTION = "compaction"  # the block server-side compaction puts first in a reply
COMPACT_BETA = "compact-2026-01-12"
_COMPACT_EDIT = "compact_20260112"

FINISH_REASONS: dict[str | None, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "pause_turn": "pause_turn",
    "refusal": "refusal",
    "model_context_window_exceeded": "context_exceeded",
    # Paused after a server-side compaction: the turn goes back as is, to go on.
    "compaction": "pause_turn",
}

_EFFORT_BUDGET = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576}


def request_body(
    model: str,
    messages: Sequence[Message],
    options: ModelOptions,
    capabilities: Capabilities,
    *,
    stream: bool,
    default_max_tokens: int,
) -> dict[str, Any]:
    system = [{"type": "text", "text": m.text} for m in messages if isinstance(m, SystemMessage)]
    turns, last_blocks = _turns(since_compaction(messages), capabilities)
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": options.max_tokens or default_max_tokens,
        "messages": turns,
    }
    if system:
        body["system"] = system
    thinking = _thinking(options, capabilities, body["max_tokens"])
    if thinking is not None:
        body["thinking"] = thinking
    elif options.temperature is not None and capabilities.temperature:
        # Anthropic rejects a temperature other than 1 with thinking on.
        body["temperature"] = options.temperature
    if options.tools and capabilities.tools:
        body["tools"] = [_tool(t) for t in options.tools]
        if options.tool_choice in ("auto", "none"):
            body["tool_choice"] = {"type": options.tool_choice}
        elif options.tool_choice == "required":
            body["tool_choice"] = {"type": "any"}
    if options.cache_control is not None and capabilities.prompt_caching:
        _mark_cache(body, options.cache_control, last_blocks)
    tier = body_tier(options, None)
    if tier is not None:
        body["service_tier"] = tier
    if options.server_compaction is not None:
        if not capabilities.server_compaction:
            raise CapabilityError(
                f"{model} has no server_compaction capability: the provider cannot compact"
                " its context (pass Capabilities(server_compaction=True) if it can)",
                model=model,
                capability="server_compaction",
            )
        body["context_management"] = {"edits": [_compact_edit(options.server_compaction)]}
    if stream:
        body["stream"] = True
    body.update(options.provider_options.get(PROVIDER, {}))
    return body


def _compact_edit(spec: ServerCompaction) -> dict[str, Any]:
    edit: dict[str, Any] = {
        "type": _COMPACT_EDIT,
        "trigger": {"type": "input_tokens", "value": spec.trigger},
        "pause_after_compaction": spec.pause_after_compaction,
    }
    if spec.instructions is not None:
        edit["instructions"] = spec.instructions
    return edit


def beta_headers(body: dict[str, Any], given: str | None) -> dict[str, str] | None:
    """The `anthropic-beta` header a body needs (joined to one the model was given)."""
    edits = (body.get("context_management") or {}).get("edits") or ()
    if not any(e.get("type") == _COMPACT_EDIT for e in edits):
        return None
    return compact_betas(given)


def compact_betas(given: str | None) -> dict[str, str]:
    """The `anthropic-beta` header of server-side compaction, with the model's own."""
    betas = [b.strip() for b in (given or "").split(",") if b.strip()]
    if COMPACT_BETA not in betas:
        betas.append(COMPACT_BETA)
    return {"anthropic-beta": ",".join(betas)}


def since_compaction(messages: Sequence[Message]) -> list[Message]:
    """What is sent: the provider reads nothing before the latest compaction block, so
    the turns before it (system messages aside) and the blocks before it in its own turn
    are left out; the block and all after it go as they came."""
    for k in range(len(messages) - 1, -1, -1):
        message = messages[k]
        if not isinstance(message, AssistantMessage):
            continue
        at = [i for i, p in enumerate(message.content) if _is_compaction(p)]
        if at:
            kept = message.model_copy(update={"content": message.content[at[-1] :]})
            system = [m for m in messages[:k] if isinstance(m, SystemMessage)]
            return [*system, kept, *messages[k + 1 :]]
    return list(messages)


def _is_compaction(part: ContentPart) -> bool:
    return isinstance(part, ProviderBlock) and part.provider == PROVIDER and part.kind == COMPACTION


def _thinking(options: ModelOptions, capabilities: Capabilities, max_tokens: int) -> Any:
    reasoning = options.reasoning
    if reasoning is None or not capabilities.reasoning:
        return None
    budget = reasoning.max_tokens or _EFFORT_BUDGET.get(reasoning.effort or "medium", 8192)
    # The budget must be >= 1024 and below max_tokens.
    budget = max(1024, min(budget, max_tokens - 1))
    if budget >= max_tokens:
        return None
    return {"type": "enabled", "budget_tokens": budget}


def _tool(spec: ToolSpec) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": spec.name, "input_schema": spec.parameters}
    if spec.description:
        tool["description"] = spec.description
    if spec.strict is not None:
        tool["strict"] = spec.strict
    return tool


def _turns(
    messages: Sequence[Message], capabilities: Capabilities
) -> tuple[list[dict[str, Any]], list[dict[str, Any] | None]]:
    """Anthropic roles alternate: tool results ride in user turns; same-role turns merge.

    Also returns, for each of our messages, its last block that may carry a cache
    breakpoint (None for system messages and for messages with only thinking).
    """
    turns: list[dict[str, Any]] = []
    last_blocks: list[dict[str, Any] | None] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            last_blocks.append(None)
            continue
        role = "assistant" if isinstance(message, AssistantMessage) else "user"
        blocks = _blocks(message, capabilities)
        cacheable = [b for b in blocks if b["type"] not in _UNCACHEABLE]
        last_blocks.append(cacheable[-1] if cacheable else None)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return turns, last_blocks


def _blocks(message: Message, capabilities: Capabilities) -> list[dict[str, Any]]:
    if isinstance(message, ToolMessage):
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.call_id,
            "content": _tool_content(message, capabilities),
        }
        if message.is_error:
            result["is_error"] = True
        return [result]
    blocks = [b for b in (_part(p, capabilities) for p in message.content) if b is not None]
    if isinstance(message, AssistantMessage):
        blocks.extend(
            {"type": "tool_use", "id": c.call_id, "name": c.name, "input": c.arguments or {}}
            for c in message.tool_calls
        )
    return blocks


def _tool_content(message: ToolMessage, capabilities: Capabilities) -> str | list[dict[str, Any]]:
    """A tool result's text; its text and image blocks in order when it holds images."""
    if not any(isinstance(p, ImagePart) for p in message.content):
        return message.text
    parts = [p for p in message.content if isinstance(p, (TextPart, ImagePart))]
    return [b for b in (_part(p, capabilities) for p in parts) if b is not None]


def _part(part: ContentPart, capabilities: Capabilities) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, ImagePart):
        require_vision(capabilities)
        inline = image_data(part)
        if inline is None:
            return {"type": "image", "source": {"type": "url", "url": part.url}}
        media_type, data = inline
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }
    # Thinking blocks go back verbatim, signature and all; other providers' blocks cannot.
    return dict(part.data) if part.provider == PROVIDER else None


def _mark_cache(
    body: dict[str, Any], cache: CacheControl, last_blocks: list[dict[str, Any] | None]
) -> None:
    """Put breakpoints where `cache` says: a count is placed here (`_placed`); named
    positions are the last tool, the last system block, and the last cacheable block
    of the messages named (an int indexes the messages we were given)."""
    marker: dict[str, Any] = {"type": "ephemeral"}
    if cache.ttl == "1h":
        marker["ttl"] = "1h"
    if isinstance(cache.breakpoints, int):
        candidates, count = _placed(body), cache.breakpoints
    else:
        candidates = [_named(body, point, last_blocks) for point in cache.breakpoints]
        count = 4
    targets: list[dict[str, Any]] = []
    for target in candidates:
        if target is not None and all(t is not target for t in targets):
            targets.append(target)
    # Anthropic allows at most four breakpoints (a count is at most four).
    for target in targets[:count]:
        target["cache_control"] = marker


def _named(
    body: dict[str, Any], point: str | int, last_blocks: list[dict[str, Any] | None]
) -> dict[str, Any] | None:
    if point == "tools" and body.get("tools"):
        return body["tools"][-1]  # type: ignore[no-any-return]
    if point == "system" and body.get("system"):
        return body["system"][-1]  # type: ignore[no-any-return]
    if point == "last_message":
        return next((b for b in reversed(last_blocks) if b is not None), None)
    if isinstance(point, int) and -len(last_blocks) <= point < len(last_blocks):
        return last_blocks[point]
    return None


def _placed(body: dict[str, Any]) -> list[dict[str, Any] | None]:
    """Where a count of breakpoints goes, best first (see `CacheControl`): the end of
    the last turn, the end of the stable prefix (system, else tools), the end of the
    user turn before the last, the last tool."""
    ends = [(turn["role"], _last_cacheable(turn["content"])) for turn in body["messages"]]
    last = next((end for _, end in reversed(ends) if end is not None), None)
    earlier_user = next(
        (e for role, e in reversed(ends) if role == "user" and e is not None and e is not last),
        None,
    )
    tool = body["tools"][-1] if body.get("tools") else None
    system = body["system"][-1] if body.get("system") else None
    return [last, system or tool, earlier_user, tool]


def _last_cacheable(content: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((b for b in reversed(content) if b["type"] not in _UNCACHEABLE), None)


def usage_from(raw: Any, previous: Usage | None = None) -> Usage:
    """Anthropic usage: `input_tokens` excludes cache reads and writes. The top-level
    fields are the request's own model's; `usage.iterations` adds what they leave out:
    a server-side compaction's own iteration (the same model: added to each field this
    usage object sets) and each advisor sub-inference (`advisor_message`: another
    model, counted in every field and kept by model in `other_models`, to be priced at
    that model's rates). A stream's later usage (`previous` then `raw`) is cumulative."""
    if not isinstance(raw, dict):
        return previous or Usage(requests=1)
    base = previous or Usage(requests=1, input_includes_cache=False)
    creation = raw.get("cache_creation") or {}
    iterations = raw.get("iterations")
    extra = _compaction_usage(iterations)
    others = _advisor_usage(iterations) or base.other_models
    before, now = _summed(base.other_models), _summed(others)

    def add(key: str, field: str) -> int:
        value = raw.get(key)
        own: int = getattr(base, field) - getattr(before, field)  # unsaid: as it was
        if value is not None:
            own = int(value) + extra.get(key, 0)
        total: int = own + getattr(now, field)
        return total

    own_1h = creation.get("ephemeral_1h_input_tokens")
    if own_1h is None:
        own_1h = base.cache_write_1h_tokens - before.cache_write_1h_tokens
    return base.model_copy(
        update={
            "input_tokens": add("input_tokens", "input_tokens"),
            "output_tokens": add("output_tokens", "output_tokens"),
            "cached_tokens": add("cache_read_input_tokens", "cached_tokens"),
            "cache_write_tokens": add("cache_creation_input_tokens", "cache_write_tokens"),
            "cache_write_1h_tokens": int(own_1h) + now.cache_write_1h_tokens,
            "input_includes_cache": False,
            "other_models": others,
        }
    )


def _compaction_usage(iterations: Any) -> dict[str, int]:
    totals: dict[str, int] = {}
    for entry in iterations if isinstance(iterations, list) else ():
        if isinstance(entry, dict) and entry.get("type") == COMPACTION:
            for key, value in entry.items():
                if isinstance(value, int) and not isinstance(value, bool):
                    totals[key] = totals.get(key, 0) + value
    return totals


ADVISOR = "advisor_message"  # an advisor sub-inference's entry in `usage.iterations`


def _advisor_usage(iterations: Any) -> dict[str, Usage] | None:
    """The advisor sub-inferences' tokens, by the model that ran them (None: none)."""
    found: dict[str, Usage] = {}
    for entry in iterations if isinstance(iterations, list) else ():
        if not isinstance(entry, dict) or entry.get("type") != ADVISOR:
            continue
        model = entry.get("model")
        if not isinstance(model, str) or not model:
            raise TypeError("an advisor iteration without its model")
        creation = entry.get("cache_creation") or {}
        usage = Usage(
            input_tokens=int(entry.get("input_tokens") or 0),
            output_tokens=int(entry.get("output_tokens") or 0),
            cached_tokens=int(entry.get("cache_read_input_tokens") or 0),
            cache_write_tokens=int(entry.get("cache_creation_input_tokens") or 0),
            cache_write_1h_tokens=int(creation.get("ephemeral_1h_input_tokens") or 0),
            input_includes_cache=False,
        )
        found[model] = found[model] + usage if model in found else usage
    return found or None


_NONE = Usage(input_includes_cache=False)


def _summed(others: dict[str, Usage] | None) -> Usage:
    return sum(others.values(), _NONE) if others else _NONE


def iterations_of(raw: Any) -> list[dict[str, Any]] | None:
    """The usage's per-iteration entries (`usage.iterations`), when it has them."""
    found = raw.get("iterations") if isinstance(raw, dict) else None
    return [dict(e) for e in found if isinstance(e, dict)] if isinstance(found, list) else None


def finish_reason(raw: str | None) -> FinishReason:
    return FINISH_REASONS.get(raw, "error" if raw else "stop")


def content_from(blocks: list[dict[str, Any]]) -> tuple[list[ContentPart], list[ToolCall]]:
    """Our content parts and tool calls from Anthropic content blocks."""
    content: list[ContentPart] = []
    calls: list[ToolCall] = []
    for block in blocks:
        kind = block["type"]
        if kind == "text":
            content.append(TextPart(text=block["text"]))
        elif kind == "tool_use":
            raw = block.get("input")
            text = raw if isinstance(raw, str) else json.dumps(raw)
            calls.append(ToolCall.parse(block["id"], block["name"], text))
        else:
            content.append(ProviderBlock(provider=PROVIDER, kind=kind, data=block))
    return content, calls


@dataclass
class StreamState:
    """Content blocks assembled from stream events, by index."""

    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    partial_json: dict[int, list[str]] = field(default_factory=dict)
    stop_reason: str | None = None
    stopped: bool = False
    response_id: str | None = None
    model: str | None = None
    usage: Usage | None = None
    service_tier: str | None = None
    iterations: list[dict[str, Any]] | None = None

    def finished_blocks(self) -> list[dict[str, Any]]:
        """The blocks as a non-streamed reply has them. A block that received
        `input_json_delta`s gets its input: a client `tool_use` the raw text (parsed as
        its call is), any other (`server_tool_use`, `mcp_tool_use`) the parsed object, to
        go back verbatim next turn (ValueError when it is not JSON)."""
        out = []
        for index, block in sorted(self.blocks.items()):
            fragments = self.partial_json.get(index)
            if block["type"] == "tool_use":
                block = {**block, "input": "".join(fragments or ())}
            elif fragments is not None and "".join(fragments).strip():
                block = {**block, "input": json.loads("".join(fragments))}
            out.append(block)
        return out

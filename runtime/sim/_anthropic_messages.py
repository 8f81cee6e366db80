"""The Anthropic Messages wire: request facts, response bodies, SSE events, errors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic_core import from_json, to_json
from typing_extensions import Unpack

from . import _compaction as compaction
from ._tiers import requested_tier
from ._tokens import MEDIA_TOKENS, MESSAGE_OVERHEAD, PrefixHasher, count_tokens, stream_pieces
from ._types import (
    Compacted,
    ErrorWhere,
    Finish,
    ParsedRequest,
    Plan,
    SSEStream,
    WireError,
    typed_parts,
)

_STOP: dict[Finish, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
    "pause_turn": "pause_turn",
    "refusal": "refusal",
}
_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    402: ("billing_error", "Your credit balance is too low to access the Anthropic API."),
    403: ("permission_error", "Your API key does not have permission to use the resource."),
    404: ("not_found_error", "Not found"),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "This request would exceed your rate limit."),
    500: ("api_error", "Internal server error"),
    504: ("timeout_error", "Request timed out"),
    529: ("overloaded_error", "Overloaded"),
}
_PING = b'event: ping\ndata: {"type":"ping"}\n\n'


class AnthropicWire:
    """Anthropic Messages (``POST /v1/messages``)."""

    api: Final = "anthropic"
    tool_id_prefix: Final = "toolu_"
    request_id_header: Final = "request-id"
    response_id_prefix: Final = "msg_sim"

    def parse(self, body: object, *, require_max_tokens: bool = True) -> ParsedRequest:
        if not isinstance(body, dict):
            raise WireError("The request body must be a JSON object.")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise WireError("model: Field required", param="model")
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise WireError("messages: Field required", param="messages")
        max_tokens = body.get("max_tokens")
        if max_tokens is None and not require_max_tokens:
            pass
        elif not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise WireError("max_tokens: Field required", param="max_tokens")
        edit = compaction.compaction_edit(body)
        walk = _Walk()
        walk.tools(body.get("tools") or [])
        walk.system(body.get("system"))
        kept = walk.total
        walk.messages(compaction.replayed(messages))
        done = (
            None if edit is None else compaction.compacted(edit, walk.total, kept, walk.last_user)
        )
        req = ParsedRequest(
            api="anthropic",
            model=model,
            stream=bool(body.get("stream")),
            system_text=walk.system_text,
            last_user_text=walk.last_user,
            has_tools=bool(body.get("tools")),
            after_tool_result=walk.after_tool_result,
            max_tokens=max_tokens,
            include_usage=True,
            response_schema=_output_schema(body),
            json_mode=False,
            input_tokens=walk.total if done is None else done.after_tokens,
            prior_tool_calls=walk.tool_uses,
            service_tier=requested_tier(body, anthropic=True),
            compacted=done,
            advisor_model=_advisor_model(body.get("tools")),
        )
        if done is None and (walk.breakpoints or body.get("cache_control")):
            _cache_prefixes(req, walk, top_level=bool(body.get("cache_control")))
        return req

    def api_key(self, headers: Mapping[str, str]) -> str | None:
        key = headers.get("x-api-key")
        if key is None:
            auth = headers.get("Authorization", "")
            key = auth[7:] if auth.startswith("Bearer ") else None
        return key

    def error(self, status: int, message: str | None = None, **where: Unpack[ErrorWhere]) -> bytes:
        default = ("api_error", "Internal server error") if status >= 500 else _ERRORS[400]
        kind, text = _ERRORS.get(status, default)
        return to_json(
            {
                "type": "error",
                "error": {"type": kind, "message": message or text},
                "request_id": where["request_id"],
            }
        )

    def context_error(self, limit: int, tokens: int, *, request_id: str) -> bytes:
        message = f"prompt is too long: {tokens} tokens > {limit} maximum"
        return self.error(400, message, request_id=request_id)

    def stream_error(self, data: bytes) -> bytes:
        return b"event: error\ndata: " + data + b"\n\n"

    def body(self, plan: Plan, req: ParsedRequest, response_id: str) -> bytes:
        content = [] if plan.empty else [block for block, _ in _blocks(plan)]
        done = req.compacted
        if done is not None:
            content = [done.block] if done.pause else [done.block, *content]
        message = _message(req, response_id, content)
        message["stop_reason"] = _stop(plan, req)
        message["usage"] = {**_usage(plan, req), "output_tokens": plan.output_tokens}
        if done is not None:
            message["usage"].update(_compaction_usage(done, plan))
        _add_advisors(message["usage"], plan, req)
        if plan.finish in ("refusal", "content_filter") and not (done and done.pause):
            message["stop_details"] = _REFUSAL_DETAILS
        return to_json(message)

    def stream(self, plan: Plan, req: ParsedRequest, response_id: str) -> SSEStream:
        out = _Events()
        start = _message(req, response_id, [])
        start["usage"] = {**_usage(plan, req), "output_tokens": min(plan.output_tokens, 1)}
        out.add("message_start", {"type": "message_start", "message": start})
        out.events.append(_PING)
        out.tokens.append(0)
        done = req.compacted
        first = 0
        if done is not None:
            _stream_compaction(out, done.block)
            first = 1
        if not plan.empty and not (done and done.pause):
            for index, (block, arguments) in enumerate(_blocks(plan), start=first):
                _stream_block(out, index, block, arguments)
        body_end = len(out.events)
        delta: dict[str, Any] = {"stop_reason": _stop(plan, req), "stop_sequence": None}
        if plan.finish in ("refusal", "content_filter") and not (done and done.pause):
            delta["stop_details"] = _REFUSAL_DETAILS
        usage = {k: v for k, v in _usage(plan, req).items() if k in _DELTA_USAGE}
        usage["output_tokens"] = plan.output_tokens
        if done is not None:
            usage.update(_compaction_usage(done, plan))
        _add_advisors(usage, plan, req)
        out.add("message_delta", {"type": "message_delta", "delta": delta, "usage": usage})
        out.add("message_stop", {"type": "message_stop"})
        return SSEStream(out.events, out.tokens, body_end)


_DELTA_USAGE = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def _stop(plan: Plan, req: ParsedRequest) -> str:
    return "compaction" if req.compacted and req.compacted.pause else _STOP[plan.finish]


def _compaction_usage(done: Compacted, plan: Plan) -> dict[str, Any]:
    """The usage fields a compaction sets: its iterations; with a pause, a reply that
    sampled nothing besides the compaction (its tokens are only in its entry)."""
    usage: dict[str, Any] = {"iterations": compaction.iterations(done, plan.output_tokens)}
    if done.pause:
        usage.update(input_tokens=0, output_tokens=0)
    return usage


def _advisor_model(tools: object) -> str | None:
    """The model the request's advisor tool (`advisor_20260301`) names, if it has one."""
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict) and str(tool.get("type", "")).startswith("advisor_"):
            model = tool.get("model")
            if not isinstance(model, str) or not model:
                raise WireError("tools: the advisor tool needs a model", param="tools")
            return model
    return None


def _add_advisors(usage: dict[str, Any], plan: Plan, req: ParsedRequest) -> None:
    """A reply that consulted the advisor: one `advisor_message` entry per call in
    `usage.iterations` (after the executor's `message` entry, made here when no
    compaction made the list), each the advisor model reading the request's input and
    writing its advice. The top-level fields stay the executor's alone."""
    advice = [result for use, result in plan.server_tools if use["name"] == "advisor"]
    if not advice or plan.empty:
        return
    entries = usage.get("iterations")
    if entries is None:
        entries = usage["iterations"] = [
            {
                "type": "message",
                "input_tokens": usage.get("input_tokens", 0),
                "output_tokens": usage["output_tokens"],
                "cache_read_input_tokens": usage.get("cache_read_input_tokens", 0),
                "cache_creation_input_tokens": usage.get("cache_creation_input_tokens", 0),
            }
        ]
    for result in advice:
        content = result.get("content")
        said = content.get("text") if isinstance(content, dict) else None
        written = count_tokens(said if isinstance(said, str) else to_json(content).decode())
        entries.append(
            {
                "type": "advisor_message",
                "model": req.advisor_model or req.model,
                "input_tokens": req.input_tokens,
                "output_tokens": written,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0,
            }
        )


def _stream_compaction(out: _Events, block: dict[str, Any]) -> None:
    """A compaction block: started empty, its summary whole in one `compaction_delta`."""
    out.block_start(0, {"type": "compaction", "content": None, "encrypted_content": None})
    delta = {k: block[k] for k in ("content", "encrypted_content")}
    out.block_delta(0, {"type": "compaction_delta", **delta}, str(block["content"]))
    out.add("content_block_stop", {"type": "content_block_stop", "index": 0})


_REFUSAL_DETAILS = {"type": "refusal", "category": None, "explanation": None}


def _message(req: ParsedRequest, response_id: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": response_id,
        "type": "message",
        "role": "assistant",
        "model": req.model,
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
    }


def _usage(plan: Plan, req: ParsedRequest) -> dict[str, Any]:
    written = plan.cache_write_tokens
    fresh = plan.input_tokens - plan.cache_read_tokens - written
    long_ttl = written if req.cache_ttl_1h else 0
    return {
        "input_tokens": max(fresh, 0),
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": plan.cache_read_tokens,
        "cache_creation": {
            "ephemeral_5m_input_tokens": written - long_ttl,
            "ephemeral_1h_input_tokens": long_ttl,
        },
        "service_tier": req.served_tier or "standard",
    }


def _blocks(plan: Plan) -> list[tuple[dict[str, Any], str | None]]:
    """The content blocks in order, each with its raw argument string (tool uses)."""
    blocks: list[tuple[dict[str, Any], str | None]] = []
    if plan.thinking is not None:
        signature = plan.thinking_signature or ""
        blocks.append(
            ({"type": "thinking", "thinking": plan.thinking, "signature": signature}, None)
        )
    if plan.redacted_thinking is not None:
        blocks.append(({"type": "redacted_thinking", "data": plan.redacted_thinking}, None))
    for use, result in plan.server_tools:
        blocks.append((use, to_json(use["input"]).decode()))
        blocks.append((result, None))
    text = plan.refusal if plan.refusal is not None else plan.text
    if text is not None:
        block: dict[str, Any] = {"type": "text", "text": text}
        if plan.citations:
            block["citations"] = plan.citations
        blocks.append((block, None))
    for call in plan.tool_calls:
        block = {"type": "tool_use", "id": call.id, "name": call.name}
        blocks.append(({**block, "input": _tool_input(call.arguments)}, call.arguments))
    return blocks


def _tool_input(arguments: str) -> Any:
    """The parsed arguments; a string that is not a JSON object (scripted malformed
    arguments, a ``max_tokens`` cut) is sent verbatim as a JSON string."""
    try:
        value = from_json(arguments)
    except ValueError:
        return arguments
    return value if isinstance(value, dict) else arguments


def _stream_block(out: _Events, index: int, block: dict[str, Any], arguments: str | None) -> None:
    kind = block["type"]
    if kind == "thinking":
        out.block_start(index, {"type": "thinking", "thinking": "", "signature": ""})
        for piece in stream_pieces(block["thinking"]):
            out.block_delta(index, {"type": "thinking_delta", "thinking": piece}, piece)
        out.block_delta(index, {"type": "signature_delta", "signature": block["signature"]})
    elif kind == "redacted_thinking":
        out.block_start(index, block)
    elif kind == "text":
        out.block_start(index, {"type": "text", "text": ""})
        for citation in block.get("citations", ()):
            out.block_delta(index, {"type": "citations_delta", "citation": citation})
        for piece in stream_pieces(block["text"]):
            out.block_delta(index, {"type": "text_delta", "text": piece}, piece)
    elif kind.endswith("_tool_result"):
        out.block_start(index, block)  # a result block comes whole
    else:  # tool_use, server_tool_use, mcp_tool_use: the input as input_json_delta
        out.block_start(index, {**block, "input": {}})
        out.block_delta(index, {"type": "input_json_delta", "partial_json": ""})
        for piece in stream_pieces(arguments or ""):
            out.block_delta(index, {"type": "input_json_delta", "partial_json": piece}, piece)
    out.add("content_block_stop", {"type": "content_block_stop", "index": index})


class _Events:
    def __init__(self) -> None:
        self.events: list[bytes] = []
        self.tokens: list[int] = []

    def add(self, name: str, data: dict[str, Any], tokens: int = 0) -> None:
        self.events.append(b"event: " + name.encode() + b"\ndata: " + to_json(data) + b"\n\n")
        self.tokens.append(tokens)

    def block_start(self, index: int, block: dict[str, Any]) -> None:
        event = {"type": "content_block_start", "index": index, "content_block": block}
        self.add("content_block_start", event)

    def block_delta(self, index: int, delta: dict[str, Any], piece: str = "") -> None:
        event = {"type": "content_block_delta", "index": index, "delta": delta}
        self.add("content_block_delta", event, count_tokens(piece))


def _output_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    fmt = (body.get("output_config") or {}).get("format") or body.get("output_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = fmt.get("schema")
        return schema if isinstance(schema, dict) else None
    return None


class _Walk:
    """One pass over tools, system and messages in prompt order, collecting token
    counts per unit (a tool, a content block) and the cache breakpoints."""

    def __init__(self) -> None:
        self.units: list[tuple[Any, int]] = []
        self.breakpoints: list[int] = []
        self.total = 0
        self.system_text = ""
        self.last_user: str | None = None
        self.after_tool_result = False
        self.tool_uses = 0

    def unit(self, payload: Any, tokens: int) -> None:
        if isinstance(payload, dict) and payload.get("cache_control"):
            self.breakpoints.append(len(self.units))
        self.units.append((payload, tokens))
        self.total += tokens

    def tools(self, tools: object) -> None:
        if not isinstance(tools, list):
            raise WireError("tools: Input should be a valid list", param="tools")
        for tool in tools:
            self.unit(tool, count_tokens(to_json(_strip(tool)).decode()))

    def system(self, system: object) -> None:
        if not system:
            return
        blocks = [{"type": "text", "text": system}] if isinstance(system, str) else system
        if not isinstance(blocks, list):
            raise WireError("system: Input should be a valid string or list", param="system")
        texts = [b.get("text", "") for b in blocks if isinstance(b, dict)]
        self.system_text = "\n".join(t for t in texts if isinstance(t, str))
        for i, block in enumerate(blocks):
            self.unit(block, _block_tokens(block) + (MESSAGE_OVERHEAD if i == 0 else 0))

    def messages(self, messages: list[Any]) -> None:
        pending: list[str] = []  # the tool_use ids of the last assistant turn
        for index, msg in enumerate(messages):
            if not isinstance(msg, dict):
                raise WireError("messages: each message must be an object", param="messages")
            role, content = msg.get("role"), msg.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            if not isinstance(blocks, list):
                raise WireError("messages: content must be a string or list", param="messages")
            self.unit(role, MESSAGE_OVERHEAD)
            texts, tool_results = [], False
            answered: set[str] = set()
            uses: list[str] = []
            for block in blocks:
                self.unit(block, _block_tokens(block))
                kind = block.get("type") if isinstance(block, dict) else None
                if kind == "text":
                    texts.append(str(block.get("text", "")))
                elif kind == "tool_result":
                    tool_results = True
                    answered.add(str(block.get("tool_use_id", "")))
                    _check_tool_result(block)
                elif kind == "tool_use":
                    self.tool_uses += 1
                    uses.append(str(block.get("id", "")))
            missing = [use for use in pending if use not in answered]
            if missing:
                _unanswered(missing, index - 1)
            pending = uses if role == "assistant" else []
            if role == "user" and texts:
                self.last_user = "\n".join(texts)
            self.after_tool_result = role == "user" and tool_results


def _unanswered(uses: list[str], index: int) -> None:
    """What the API answers tool_use blocks with no tool_result right after them."""
    raise WireError(
        f"messages.{index}: `tool_use` ids were found without `tool_result` blocks "
        f"immediately after: {', '.join(uses)}. Each `tool_use` block must have a "
        "corresponding `tool_result` block in the next message.",
        param="messages",
    )


_RESULT_BLOCKS = ("text", "image", "document", "search_result")


def _check_tool_result(block: dict[str, Any]) -> None:
    content = block.get("content")
    if content is None or isinstance(content, str) or typed_parts(content, _RESULT_BLOCKS):
        return
    raise WireError(
        "messages: tool_result content must be a string or a list of text, image, "
        "document and search_result blocks",
        param="messages",
    )


def _strip(block: Any) -> Any:
    if isinstance(block, dict) and "cache_control" in block:
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def _block_tokens(block: object) -> int:
    if not isinstance(block, dict):
        return count_tokens(str(block))
    kind = block.get("type")
    if kind == "text":
        return count_tokens(str(block.get("text", "")))
    if kind == "tool_use":
        return count_tokens(str(block.get("name", ""))) + count_tokens(
            to_json(block.get("input", {})).decode()
        )
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            return sum(_block_tokens(b) for b in content)
        return count_tokens(str(content)) if content else 0
    if kind == "thinking":
        return count_tokens(str(block.get("thinking", "")))
    if kind == "redacted_thinking":
        return count_tokens(str(block.get("data", "")))
    if kind == "compaction":
        return count_tokens(str(block.get("content") or ""))
    if kind in ("image", "document"):
        return MEDIA_TOKENS
    return count_tokens(to_json(_strip(block)).decode())


def _cache_prefixes(req: ParsedRequest, walk: _Walk, *, top_level: bool) -> None:
    """Prefixes end at block boundaries. Each prefix up to the last breakpoint may be a
    cache hit (Anthropic looks back from a breakpoint); breakpoints are written."""
    breakpoints = set(walk.breakpoints)
    if top_level and walk.units:
        breakpoints.add(len(walk.units) - 1)
    last = max(breakpoints)
    hasher = PrefixHasher(req.model)
    total = 0
    for i, (payload, tokens) in enumerate(walk.units[: last + 1]):
        hasher.update(to_json(_strip(payload)))
        total += tokens
        digest = hasher.checkpoint()
        req.cache_candidates.append((digest, total))
        if i in breakpoints:
            req.cache_writes.append(digest)
    req.cache_breakpoint_tokens = total
    # The whole write is billed at the TTL of the last breakpoint (a simplification).
    payload = walk.units[last][0]
    control = payload.get("cache_control") if isinstance(payload, dict) else None
    req.cache_ttl_1h = isinstance(control, dict) and control.get("ttl") == "1h"

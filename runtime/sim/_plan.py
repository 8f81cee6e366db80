"""Resolve a scripted :class:`Reply` against a request into a wire-neutral :class:`Plan`:
JSON and schema replies, tool-call ids, the ``max_tokens`` cut-off, content faults and
usage."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from pydantic_core import to_json

from ._schema_instance import schema_instance
from ._script import Fault, Reply
from ._tokens import count_tokens, cut_text
from ._types import Finish, ParsedRequest, Plan, PlannedToolCall

DEFAULT_REFUSAL = "I'm sorry, but I can't help with that."
_DEFAULT_TEXT_CHARS = 60


def default_reply(req: ParsedRequest) -> Reply:
    """The reply when no rule matches: JSON when the request asks for it, else a text
    echoing the start of the last user message. Never a tool call."""
    # model_construct: built per unmatched request, and these values need no validation.
    if req.response_schema is not None or req.json_mode:
        return Reply.model_construct(json_value="schema")
    if req.last_user_text:
        text = f"Simulated reply to: {req.last_user_text[:_DEFAULT_TEXT_CHARS]}"
        return Reply.model_construct(text=text)
    return Reply.model_construct(text="Simulated reply.")


def thinking_signature(thinking: str) -> str:
    """The deterministic signature of a thinking block:
    ``base64(sha256("raygent-sim:" + thinking))``."""
    digest = hashlib.sha256(b"raygent-sim:" + thinking.encode()).digest()
    return base64.b64encode(digest).decode()


def plan_reply(
    reply: Reply,
    req: ParsedRequest,
    *,
    id_prefix: str,
    fault: Fault | None,
    cache_read: int,
    cache_write: int,
) -> Plan:
    """Everything the wire renderers need; ``fault`` is applied if it alters content."""
    kind = fault.kind if fault is not None else None
    refusal = reply.refusal
    if fault is not None and fault.kind == "refusal":
        refusal = fault.message or refusal or DEFAULT_REFUSAL
    text = None if refusal is not None else _reply_text(reply, req)
    calls = [] if refusal is not None else _tool_calls(reply, req, id_prefix)
    if kind == "malformed_tool_args":
        for call in calls:
            call.arguments = malform(call.arguments)
    thinking = reply.thinking
    redacted = reply.redacted_thinking
    cut, thinking, text, refusal, calls = _cut(req.max_tokens, thinking, text, refusal, calls)
    reasoning = _count(thinking) + _count(redacted)
    output = reasoning + _count(text) + _count(refusal) + sum(_count(c.arguments) for c in calls)
    server_tools = [] if refusal is not None else _server_tools(reply)
    output += sum(_count(json.dumps(use["input"])) for use, _ in server_tools)
    input_tokens = req.input_tokens
    override = reply.usage
    if override is not None:
        input_tokens = _pick(override.input_tokens, input_tokens)
        output = _pick(override.output_tokens, output)
        cache_read = _pick(override.cached_tokens, cache_read)
    return Plan(
        text=text,
        refusal=refusal,
        thinking=thinking,
        thinking_signature=thinking_signature(thinking) if thinking is not None else None,
        redacted_thinking=redacted,
        tool_calls=calls,
        finish=_finish(reply, cut=cut, refused=refusal is not None, has_calls=bool(calls)),
        input_tokens=input_tokens,
        cache_read_tokens=min(cache_read, input_tokens),
        cache_write_tokens=min(cache_write, max(input_tokens - cache_read, 0)),
        output_tokens=output,
        reasoning_tokens=reasoning,
        empty=kind == "empty_choices",
        server_tools=server_tools,
        citations=[] if text is None else list(reply.citations),
        list_content=reply.list_content,
        finish_reason=reply.finish_reason,
        block_reason=reply.block_reason,
    )


_DEFAULT_RESULTS: dict[str, Any] = {
    "web_search_tool_result": [
        {
            "type": "web_search_result",
            "url": "https://example.com/",
            "title": "Example Domain",
            "encrypted_content": "c2ltLXJlc3VsdA==",
            "page_age": None,
        }
    ],
    "code_execution_tool_result": {
        "type": "code_execution_result",
        "stdout": "",
        "stderr": "",
        "return_code": 0,
        "content": [],
    },
    "mcp_tool_result": [{"type": "text", "text": "done"}],
    "advisor_tool_result": {
        "type": "advisor_result",
        "text": "Simulated advice: check the inputs first, then answer briefly.",
        "stop_reason": "end_turn",
    },
}


def _server_tools(reply: Reply) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each server tool's use block and result block, as Anthropic sends them."""
    out = []
    for n, tool in enumerate(reply.server_tools, 1):
        if tool.server_name is not None:
            tool_id = tool.id or f"mcptoolu_{n}"
            use: dict[str, Any] = {"type": "mcp_tool_use", "id": tool_id, "name": tool.name}
            use["server_name"] = tool.server_name
        else:
            tool_id = tool.id or f"srvtoolu_{n}"
            use = {"type": "server_tool_use", "id": tool_id, "name": tool.name}
        use["input"] = dict(tool.input)
        result: dict[str, Any] = {"type": tool.result_type, "tool_use_id": tool_id}
        content = tool.result
        if content is None:
            content = _DEFAULT_RESULTS.get(tool.result_type, [])
        result["content"] = content
        if tool.server_name is not None:
            result["is_error"] = False
        out.append((use, result))
    return out


def malform(arguments: str) -> str:
    """Invalid JSON even to a partial-JSON parser: a trailing comma before the brace
    (``{"a":1}`` becomes ``{"a":1,}``)."""
    body = arguments[:-1] if arguments.endswith("}") else arguments
    return body + ",}"


def _reply_text(reply: Reply, req: ParsedRequest) -> str | None:
    value = reply.json_value
    if value is None:
        return reply.text
    if value == "schema":
        value = schema_instance(req.response_schema) if req.response_schema else {}
    return to_json(value).decode()


def _tool_calls(reply: Reply, req: ParsedRequest, id_prefix: str) -> list[PlannedToolCall]:
    calls = []
    for i, call in enumerate(reply.tool_calls):
        args = call.arguments
        calls.append(
            PlannedToolCall(
                # A scripted empty id is sent empty (Gemini: a call without an id).
                id=call.id if call.id is not None else f"{id_prefix}{req.prior_tool_calls + i + 1}",
                name=call.name,
                # json.dumps's defaults (", ", ": ") read like model output and equal
                # what a client gets re-serialising a parsed Anthropic ``input``.
                arguments=args if isinstance(args, str) else json.dumps(args),
            )
        )
    return calls


def _cut(
    budget: int | None,
    thinking: str | None,
    text: str | None,
    refusal: str | None,
    calls: list[PlannedToolCall],
) -> tuple[bool, str | None, str | None, str | None, list[PlannedToolCall]]:
    """Apply ``max_tokens`` in emission order: thinking, text, tool calls. A tool call
    that does not fit keeps a prefix of its arguments; later ones are dropped."""
    if budget is None:
        return False, thinking, text, refusal, calls
    cut = False
    left = budget

    def take(part: str | None) -> str | None:
        nonlocal left, cut
        if part is None:
            return None
        need = count_tokens(part)
        if need <= left:
            left -= need
            return part
        cut = True
        part, left = cut_text(part, left), 0
        return part

    thinking = take(thinking)
    text = take(text)
    refusal = take(refusal)
    kept: list[PlannedToolCall] = []
    for call in calls:
        if cut and left == 0:
            break
        call.arguments = take(call.arguments) or ""
        kept.append(call)
    if cut:  # a part of which nothing fitted is not sent at all
        text, refusal = text or None, refusal or None
    return cut, thinking, text, refusal, kept


def _finish(reply: Reply, *, cut: bool, refused: bool, has_calls: bool) -> Finish:
    if cut:
        return "length"
    if reply.finish is not None:
        return reply.finish
    if refused:
        return "refusal"
    return "tool_calls" if has_calls else "stop"


def _count(text: str | None) -> int:
    return count_tokens(text) if text else 0


def _pick(override: int | None, computed: int) -> int:
    return computed if override is None else override

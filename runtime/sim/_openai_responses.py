"""The OpenAI Responses wire (``POST /v1/responses``): request facts, response bodies,
errors. Its SSE events are in :mod:`._responses_stream`."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

from pydantic_core import from_json, to_json
from typing_extensions import Unpack

from ._openai_chat import OpenAIWire, url_citations
from ._plan import thinking_signature
from ._responses_stream import stream_events
from ._tiers import requested_tier
from ._tokens import (
    MESSAGE_OVERHEAD,
    OPENAI_CACHE_MIN_TOKENS,
    PrefixHasher,
    content_text,
    count_tokens,
)
from ._types import ErrorWhere, ParsedRequest, Plan, SSEStream, WireError, typed_parts

ENCRYPTED_PREFIX = "gAAAAsim"
_CHAT = OpenAIWire()  # the same error bodies as Chat Completions
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def encrypted_reasoning(summary: str) -> str:
    """The simulator's opaque ``encrypted_content`` of a reasoning item: deterministic,
    and checked when the item comes back (an altered summary or content is a 400)."""
    return ENCRYPTED_PREFIX + thinking_signature(summary)


class ResponsesWire:
    """OpenAI Responses (``POST /v1/responses``)."""

    api: Final = "openai_responses"
    tool_id_prefix: Final = "call_"
    request_id_header: Final = "x-request-id"
    response_id_prefix: Final = "resp_sim"

    def parse(self, body: object) -> ParsedRequest:
        if not isinstance(body, dict):
            raise WireError("The request body must be a JSON object.")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise WireError("Missing required parameter: 'model'.", param="model")
        raw_input = body.get("input")
        if isinstance(raw_input, str):
            items: list[Any] = [{"role": "user", "content": raw_input}]
        elif isinstance(raw_input, list) and raw_input:
            items = raw_input
        else:
            raise WireError(
                "Missing required parameter: 'input'.",
                param="input",
                code="missing_required_parameter",
            )
        tools = body.get("tools") or []
        tools_text = to_json(tools).decode() if tools else ""
        instructions = body.get("instructions")
        walk = _Walk()
        if isinstance(instructions, str) and instructions:
            walk.system.append(instructions)
            walk.tokens.append(MESSAGE_OVERHEAD + count_tokens(instructions))
        walk.items(items)
        tools_tokens = count_tokens(tools_text)
        input_tokens = tools_tokens + sum(walk.tokens)
        include = body.get("include") or []
        req = ParsedRequest(
            api="openai_responses",
            model=model,
            stream=bool(body.get("stream")),
            system_text="\n".join(walk.system),
            last_user_text=walk.last_user,
            has_tools=bool(tools),
            after_tool_result=walk.last_kind == "function_call_output",
            max_tokens=_max_tokens(body),
            include_usage=True,
            response_schema=None,
            json_mode=False,
            input_tokens=input_tokens,
            prior_tool_calls=walk.calls,
            encrypted_reasoning="reasoning.encrypted_content" in include,
            service_tier=requested_tier(body, anthropic=False),
        )
        _text_format(body.get("text"), req)
        if input_tokens >= OPENAI_CACHE_MIN_TOKENS:
            hasher = PrefixHasher(model)
            hasher.update(tools_text.encode())
            total = tools_tokens
            for unit, tokens in zip(walk.units, walk.tokens, strict=True):
                hasher.update(to_json(unit))
                total += tokens
                if total >= OPENAI_CACHE_MIN_TOKENS:
                    digest = hasher.checkpoint()
                    req.cache_candidates.append((digest, total))
                    req.cache_writes.append(digest)
        return req

    def api_key(self, headers: Mapping[str, str]) -> str | None:
        return _CHAT.api_key(headers)

    def error(self, status: int, message: str | None = None, **where: Unpack[ErrorWhere]) -> bytes:
        return _CHAT.error(status, message, **where)

    def context_error(self, limit: int, tokens: int, *, request_id: str) -> bytes:
        message = (
            f"Your input exceeds the context window of this model ({limit} tokens; "
            f"the input has {tokens}). Please adjust your input and try again."
        )
        return self.error(
            400, message, request_id=request_id, code="context_length_exceeded", param="input"
        )

    def stream_error(self, data: bytes) -> bytes:
        """An ``error`` event as the SDK reads it: the error's fields at the top level."""
        try:
            parsed = from_json(data)
        except ValueError:
            parsed = None
        error = parsed.get("error") if isinstance(parsed, dict) else None
        if isinstance(error, dict):
            event = {
                "type": "error",
                "code": error.get("code") or error.get("type"),
                "message": error.get("message") or "",
                "param": error.get("param"),
                "sequence_number": 0,
            }
            data = to_json(event)
        return b"event: error\ndata: " + data + b"\n\n"

    def body(self, plan: Plan, req: ParsedRequest, response_id: str) -> bytes:
        items = output_items(plan, req, response_id)
        return to_json(response_object(plan, req, response_id, items))

    def stream(self, plan: Plan, req: ParsedRequest, response_id: str) -> SSEStream:
        items = output_items(plan, req, response_id)
        final = response_object(plan, req, response_id, items)
        return stream_events(plan, final, items)


def output_items(plan: Plan, req: ParsedRequest, response_id: str) -> list[dict[str, Any]]:
    """The output items in order: reasoning (its encrypted content when the request
    includes it), the built-in tool calls of the server tools, the message (citations
    as its text's annotations), function calls."""
    if plan.empty:
        return []
    suffix = response_id.removeprefix("resp_")
    items: list[dict[str, Any]] = []
    if plan.thinking is not None:
        items.append(
            {
                "id": f"rs_{suffix}",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": plan.thinking}],
                "encrypted_content": (
                    encrypted_reasoning(plan.thinking) if req.encrypted_reasoning else None
                ),
            }
        )
    for n, (use, result) in enumerate(plan.server_tools, 1):
        if use["name"] != "advisor":  # Anthropic's alone: no Responses item is one
            items.append(server_tool_item(use, result, f"{suffix}_{n}"))
    part: dict[str, Any] | None = None
    if plan.refusal is not None:
        part = {"type": "refusal", "refusal": plan.refusal}
    elif plan.text is not None:
        annotations = url_citations(plan.text, plan.citations)
        part = {"type": "output_text", "text": plan.text, "annotations": annotations}
        part["logprobs"] = []
    if part is not None:
        items.append(
            {
                "id": f"msg_{suffix}",
                "type": "message",
                "status": "incomplete" if plan.finish == "length" else "completed",
                "role": "assistant",
                "content": [part],
            }
        )
    for i, call in enumerate(plan.tool_calls):
        items.append(
            {
                "id": f"fc_{suffix}_{i}",
                "type": "function_call",
                "status": "completed",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
            }
        )
    return items


_CODE_EXECUTION = ("code_execution", "bash_code_execution", "text_editor_code_execution")


def server_tool_item(use: dict[str, Any], result: dict[str, Any], tag: str) -> dict[str, Any]:
    """A server tool as the Responses API's built-in tool call item: an MCP tool an
    ``mcp_call`` (its output the result's text), a web search a ``web_search_call``
    (``search``; a web fetch ``open_page``), a code execution a ``code_interpreter_call``
    (its stdout as logs), a tool search a ``tool_search_call``. ``tag`` makes the id."""
    args: dict[str, Any] = use["input"]
    content = result.get("content")
    if use["type"] == "mcp_tool_use":
        return {
            "id": f"mcp_{tag}",
            "type": "mcp_call",
            "status": "completed",
            "server_label": use["server_name"],
            "name": use["name"],
            "arguments": to_json(args).decode(),
            "output": _result_text(content),
            "error": None,
        }
    name = use["name"]
    if name in _CODE_EXECUTION:
        code = args.get("code") or args.get("command") or to_json(args).decode()
        stdout = content.get("stdout") if isinstance(content, dict) else None
        return {
            "id": f"ci_{tag}",
            "type": "code_interpreter_call",
            "status": "completed",
            "code": str(code),
            "container_id": "cntr_sim",
            "outputs": [{"type": "logs", "logs": stdout}] if isinstance(stdout, str) else [],
        }
    if name.startswith("tool_search"):
        return {
            "id": f"tsc_{tag}",
            "type": "tool_search_call",
            "status": "completed",
            "execution": "server",
            "call_id": None,
            "arguments": args,
        }
    if name == "web_fetch":
        action: dict[str, Any] = {"type": "open_page", "url": args.get("url")}
    else:
        action = {"type": "search", "query": str(args.get("query", ""))}
    return {"id": f"ws_{tag}", "type": "web_search_call", "status": "completed", "action": action}


def _result_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" for p in content
    ):
        return "".join(str(p.get("text", "")) for p in content)
    return to_json(content).decode()


def response_object(
    plan: Plan, req: ParsedRequest, response_id: str, items: list[dict[str, Any]]
) -> dict[str, Any]:
    """The whole response object (``response.completed`` carries it too)."""
    reason = _INCOMPLETE.get(plan.finish)
    now = time.time()
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(now),
        "status": "incomplete" if reason else "completed",
        "completed_at": None if reason else int(now),
        "error": None,
        "incomplete_details": {"reason": reason} if reason else None,
        "model": req.model,
        "output": items,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "max_output_tokens": req.max_tokens,
        "service_tier": req.served_tier or "default",
        "usage": {
            "input_tokens": plan.input_tokens,
            "input_tokens_details": {
                "cached_tokens": plan.cache_read_tokens,
                "cache_write_tokens": 0,
            },
            "output_tokens": plan.output_tokens,
            "output_tokens_details": {"reasoning_tokens": plan.reasoning_tokens},
            "total_tokens": plan.input_tokens + plan.output_tokens,
        },
    }


class _Walk:
    """Facts and token counts of the input items, in prompt order."""

    def __init__(self) -> None:
        self.units: list[Any] = []
        self.tokens: list[int] = []
        self.system: list[str] = []
        self.last_user: str | None = None
        self.last_kind: str | None = None
        self.calls = 0

    def items(self, items: list[Any]) -> None:
        calls: set[str] = set()
        outputs: set[str] = set()
        for item in items:
            if not isinstance(item, dict):
                raise WireError("Each input item must be a JSON object.", param="input")
            kind = item.get("type") or "message"
            tokens = MESSAGE_OVERHEAD
            if kind == "message":
                text, tokens_in = content_text(item.get("content"), "input")
                tokens += tokens_in
                role = item.get("role")
                if role in ("system", "developer"):
                    self.system.append(text)
                elif role == "user":
                    self.last_user = text
            elif kind == "function_call":
                self.calls += 1
                calls.add(str(item.get("call_id", "")))
                tokens += count_tokens(str(item.get("name", "")))
                tokens += count_tokens(str(item.get("arguments", "")))
            elif kind == "function_call_output":
                outputs.add(str(item.get("call_id", "")))
                tokens += _output_tokens(item.get("output", ""))
            elif kind == "reasoning":
                tokens += _check_reasoning(item)
            elif kind in BUILTIN_ITEMS:  # a built-in tool's item, replayed
                tokens += count_tokens(to_json(item).decode())
            else:
                raise WireError(f"Invalid input item type: {kind!r}.", param="input")
            self.last_kind = kind
            self.units.append(item)
            self.tokens.append(tokens)
        missing = sorted(calls - outputs)
        if missing:
            raise WireError(f"No tool output found for function call {missing[0]}.", param="input")


_OUTPUT_PARTS = ("input_text", "input_image", "input_file")
# The input item kinds of the built-in tools (and references to stored items) that the
# API takes back as they came out.
BUILTIN_ITEMS = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "computer_call",
        "computer_call_output",
        "local_shell_call",
        "local_shell_call_output",
        "shell_call",
        "shell_call_output",
        "apply_patch_call",
        "apply_patch_call_output",
        "tool_search_call",
        "tool_search_output",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
        "custom_tool_call",
        "custom_tool_call_output",
        "item_reference",
    }
)


def _output_tokens(output: object) -> int:
    """A function call's output: a string, or a list of input_text / input_image /
    input_file parts (images count a fixed amount)."""
    if isinstance(output, str):
        return count_tokens(output)
    if not typed_parts(output, _OUTPUT_PARTS):
        raise WireError(
            "Invalid 'input[].output': a string or a list of input_text, input_image and "
            "input_file parts.",
            param="input",
        )
    return content_text(output, "input")[1]


def _check_reasoning(item: dict[str, Any]) -> int:
    summary = item.get("summary")
    if not isinstance(summary, list):
        raise WireError("Missing required parameter: 'input[].summary'.", param="input")
    text = "".join(str(s.get("text", "")) for s in summary if isinstance(s, dict))
    if item.get("encrypted_content") != encrypted_reasoning(text):
        raise WireError(
            f"The encrypted content for item {item.get('id')} could not be verified.",
            param="input",
            code="invalid_encrypted_content",
        )
    return count_tokens(text)


def _max_tokens(body: dict[str, Any]) -> int | None:
    value = body.get("max_output_tokens")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise WireError("max_output_tokens must be a positive integer.", param="max_output_tokens")
    return value


def _text_format(text: object, req: ParsedRequest) -> None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict):
        return
    if fmt.get("type") == "json_object":
        req.json_mode = True
    elif fmt.get("type") == "json_schema":
        schema = fmt.get("schema")
        req.json_mode = True
        req.response_schema = schema if isinstance(schema, dict) else None

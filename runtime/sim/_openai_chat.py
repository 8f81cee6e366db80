"""The OpenAI Chat Completions wire: request facts, response bodies, SSE chunks, errors."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

from pydantic_core import to_json
from typing_extensions import Unpack

from ._tiers import requested_tier
from ._tokens import (
    MESSAGE_OVERHEAD,
    OPENAI_CACHE_MIN_TOKENS,
    PrefixHasher,
    content_text,
    count_tokens,
    stream_pieces,
)
from ._types import ErrorWhere, Finish, ParsedRequest, Plan, SSEStream, WireError

FINGERPRINT = "fp_raygent_sim"
_FINISH: dict[Finish, str] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
    "pause_turn": "stop",
    "refusal": "stop",
}
# status -> (type, code, default message)
_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: ("invalid_request_error", "permission_denied", "You are not allowed to do this."),
    404: ("invalid_request_error", "not_found", "The requested resource does not exist."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests."),
    500: (
        "server_error",
        None,
        "The server had an error while processing your request. Sorry about that!",
    ),
    503: ("server_error", None, "The server is overloaded or not ready yet."),
}


class OpenAIWire:
    """OpenAI Chat Completions (``POST /v1/chat/completions``)."""

    api: Final = "openai"
    tool_id_prefix: Final = "call_"
    request_id_header: Final = "x-request-id"
    response_id_prefix: Final = "chatcmpl-sim"

    def parse(self, body: object) -> ParsedRequest:
        if not isinstance(body, dict):
            raise WireError("The request body must be a JSON object.")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise WireError("you must provide a model parameter", param="model")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise WireError(
                "Missing required parameter: 'messages'.",
                param="messages",
                code="missing_required_parameter",
            )
        tools = body.get("tools") or []
        facts = _walk_messages(messages)
        tools_text = to_json(tools).decode() if tools else ""
        tools_tokens = count_tokens(tools_text)
        input_tokens = tools_tokens + sum(facts.tokens)
        req = ParsedRequest(
            api="openai",
            model=model,
            stream=bool(body.get("stream")),
            system_text="\n".join(facts.system),
            last_user_text=facts.last_user,
            has_tools=bool(tools),
            after_tool_result=facts.last_role in ("tool", "function"),
            max_tokens=_max_tokens(body),
            include_usage=bool((body.get("stream_options") or {}).get("include_usage")),
            response_schema=None,
            json_mode=False,
            input_tokens=input_tokens,
            prior_tool_calls=facts.tool_calls,
            service_tier=requested_tier(body, anthropic=False),
        )
        _response_format(body.get("response_format"), req)
        if input_tokens >= OPENAI_CACHE_MIN_TOKENS:
            _cache_prefixes(req, model, tools_text, tools_tokens, messages, facts.tokens)
        return req

    def api_key(self, headers: Mapping[str, str]) -> str | None:
        auth = headers.get("Authorization", "")
        return auth[7:] if auth.startswith("Bearer ") else None

    def error(self, status: int, message: str | None = None, **where: Unpack[ErrorWhere]) -> bytes:
        default = ("server_error", None, "Server error.") if status >= 500 else None
        kind, default_code, text = _ERRORS.get(status) or default or _ERRORS[400]
        error = {
            "message": message or text,
            "type": kind,
            "param": where.get("param"),
            "code": where.get("code") or default_code,
        }
        return to_json({"error": error})

    def context_error(self, limit: int, tokens: int, *, request_id: str) -> bytes:
        message = (
            f"This model's maximum context length is {limit} tokens. However, your "
            f"messages resulted in {tokens} tokens. Please reduce the length of the messages."
        )
        return self.error(
            400, message, request_id=request_id, code="context_length_exceeded", param="messages"
        )

    def stream_error(self, data: bytes) -> bytes:
        return b"data: " + data + b"\n\n"

    def body(self, plan: Plan, req: ParsedRequest, response_id: str) -> bytes:
        content: Any = plan.text
        if plan.list_content:
            content = _parts(plan.thinking, plan.text)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": content,
            "refusal": plan.refusal,
            "annotations": chat_annotations(plan),
        }
        if plan.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in plan.tool_calls
            ]
        choice = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": _FINISH[plan.finish],
        }
        return to_json(
            {
                "id": response_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": req.model,
                "choices": [] if plan.empty else [choice],
                "usage": _usage(plan),
                "service_tier": req.served_tier or "default",
                "system_fingerprint": FINGERPRINT,
            }
        )

    def stream(self, plan: Plan, req: ParsedRequest, response_id: str) -> SSEStream:
        base: dict[str, Any] = {
            "id": response_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": req.model,
            "service_tier": req.served_tier or "default",
            "system_fingerprint": FINGERPRINT,
        }
        if req.include_usage:
            base["usage"] = None
        out = _Chunks(base)
        if not plan.empty:
            out.delta({"role": "assistant", "content": "", "refusal": None}, 0)
            if plan.list_content:
                for piece in stream_pieces(plan.thinking or ""):
                    out.delta({"content": _parts(piece, None)}, count_tokens(piece))
            for piece in stream_pieces(plan.text or ""):
                content: Any = _parts(None, piece) if plan.list_content else piece
                out.delta({"content": content}, count_tokens(piece))
            annotations = chat_annotations(plan)
            if annotations:  # after the text, as the search models send them
                out.delta({"annotations": annotations}, 0)
            for piece in stream_pieces(plan.refusal or ""):
                out.delta({"refusal": piece}, count_tokens(piece))
            for index, call in enumerate(plan.tool_calls):
                head = {"name": call.name, "arguments": ""}
                out.delta({"tool_calls": [_call_delta(index, head, call.id)]}, 0)
                for piece in stream_pieces(call.arguments):
                    fragment = _call_delta(index, {"arguments": piece})
                    out.delta({"tool_calls": [fragment]}, count_tokens(piece))
        body_end = len(out.events)
        if not plan.empty:
            out.delta({}, 0, finish=_FINISH[plan.finish])
        if req.include_usage:
            out.add({**base, "choices": [], "usage": _usage(plan)}, 0)
        out.events.append(b"data: [DONE]\n\n")
        out.tokens.append(0)
        return SSEStream(out.events, out.tokens, body_end)


# The Responses API's annotation kinds: a citation of one of these is sent verbatim.
RESPONSES_ANNOTATIONS = frozenset(
    {"url_citation", "file_citation", "container_file_citation", "file_path"}
)


def url_citations(text: str | None, citations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The reply's citations as the Responses API's annotations: one of its kinds
    verbatim; any other (Anthropic's) a ``url_citation`` spanning its ``cited_text`` in
    the text (the whole text when absent), its ``url`` (else ``source``) and ``title``."""
    if text is None:
        return []
    out: list[dict[str, Any]] = []
    for citation in citations:
        if citation.get("type") in RESPONSES_ANNOTATIONS:
            out.append(dict(citation))
            continue
        cited = citation.get("cited_text")
        start = text.find(cited) if isinstance(cited, str) and cited else -1
        end = start + len(cited) if start >= 0 and isinstance(cited, str) else len(text)
        title = citation.get("title") or citation.get("document_title") or ""
        out.append(
            {
                "type": "url_citation",
                "start_index": max(start, 0),
                "end_index": end,
                "url": str(citation.get("url") or citation.get("source") or ""),
                "title": str(title),
            }
        )
    return out


def chat_annotations(plan: Plan) -> list[dict[str, Any]]:
    """``message.annotations`` of Chat Completions: the url citations, each nested under
    its type (the other kinds have no Chat form and are left out)."""
    return [
        {"type": "url_citation", "url_citation": {k: v for k, v in a.items() if k != "type"}}
        for a in url_citations(plan.text, plan.citations)
        if a["type"] == "url_citation"
    ]


class _Chunks:
    def __init__(self, base: dict[str, Any]) -> None:
        self.base = base
        self.events: list[bytes] = []
        self.tokens: list[int] = []

    def add(self, chunk: dict[str, Any], tokens: int) -> None:
        self.events.append(b"data: " + to_json(chunk) + b"\n\n")
        self.tokens.append(tokens)

    def delta(self, delta: dict[str, Any], tokens: int, finish: str | None = None) -> None:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        self.add({**self.base, "choices": [choice]}, tokens)


def _parts(thinking: str | None, text: str | None) -> list[dict[str, Any]] | None:
    """Content as Mistral sends it: a ``thinking`` part (a list of text parts), then a
    ``text`` part."""
    parts: list[dict[str, Any]] = []
    if thinking is not None:
        parts.append({"type": "thinking", "thinking": [{"type": "text", "text": thinking}]})
    if text is not None:
        parts.append({"type": "text", "text": text})
    return parts or None


def _call_delta(index: int, function: dict[str, str], call_id: str | None = None) -> dict[str, Any]:
    if call_id is None:
        return {"index": index, "function": function}
    return {"index": index, "id": call_id, "type": "function", "function": function}


def _usage(plan: Plan) -> dict[str, Any]:
    return {
        "prompt_tokens": plan.input_tokens,
        "completion_tokens": plan.output_tokens,
        "total_tokens": plan.input_tokens + plan.output_tokens,
        "prompt_tokens_details": {"cached_tokens": plan.cache_read_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": plan.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


class _Facts:
    __slots__ = ("last_role", "last_user", "system", "tokens", "tool_calls")

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.system: list[str] = []
        self.last_user: str | None = None
        self.last_role: str | None = None
        self.tool_calls = 0


def _walk_messages(messages: list[Any]) -> _Facts:
    facts = _Facts()
    answered: list[str] = []  # the calls of the tool messages just before
    pending: list[str] = []  # the calls of the last assistant turn not answered yet
    for index, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise WireError("Each message must be a JSON object.", param="messages")
        role = msg.get("role")
        content = msg.get("content")
        if role == "tool":
            call_id = str(msg.get("tool_call_id", ""))
            pending = [p for p in pending if p != call_id]
        elif pending and not (role == "user" and _tool_images(content, answered)):
            _unanswered(pending, index)
        if role == "assistant":
            pending = [
                str(call.get("id", ""))
                for call in msg.get("tool_calls") or ()
                if isinstance(call, dict)
            ]
        if role == "tool" and isinstance(content, list):
            _text_only(content, index)
        text, tokens = _content(content)
        for call in msg.get("tool_calls") or ():
            function = (call.get("function") or {}) if isinstance(call, dict) else {}
            tokens += count_tokens(str(function.get("name", "")))
            tokens += count_tokens(str(function.get("arguments", "")))
            facts.tool_calls += 1
        facts.tokens.append(MESSAGE_OVERHEAD + tokens)
        if role == "tool":
            answered.append(str(msg.get("tool_call_id", "")))
        elif role == "user" and _tool_images(content, answered):
            continue  # still the turn after the tool results, not the user's
        else:
            answered = []
        if role in ("system", "developer"):
            facts.system.append(text)
        elif role == "user":
            facts.last_user = text
        facts.last_role = role if isinstance(role, str) else None
    if pending:
        _unanswered(pending, len(messages))
    return facts


def _unanswered(calls: list[str], index: int) -> None:
    """What the API answers a conversation whose assistant tool calls lack results."""
    raise WireError(
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(calls),
        param=f"messages.[{index}].role",
    )


def _tool_images(content: object, answered: list[str]) -> bool:
    """Whether a user message carries the images of the tool results just before it (a
    tool message takes text only): its first part is text naming one of their calls."""
    if not answered or not isinstance(content, list) or not content:
        return False
    first = content[0]
    lead = first.get("text") if isinstance(first, dict) else None
    return isinstance(lead, str) and any(call and call in lead for call in answered)


def _text_only(content: list[Any], index: int) -> None:
    for part in content:
        if isinstance(part, dict) and part.get("type") != "text":
            raise WireError(
                f"Invalid 'messages[{index}]'. A message with role 'tool' takes text parts "
                f"only, not {part.get('type')!r}.",
                param=f"messages[{index}].content",
            )


def _content(content: object) -> tuple[str, int]:
    """The text of a message content and its tokens (media parts count a fixed amount)."""
    if content is None:
        return "", 0
    return content_text(content, "messages", ("text", "refusal"))


def _max_tokens(body: dict[str, Any]) -> int | None:
    value = body.get("max_completion_tokens")
    if value is None:
        value = body.get("max_tokens")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise WireError("max_tokens must be a positive integer.", param="max_tokens")
    return value


def _response_format(fmt: object, req: ParsedRequest) -> None:
    if not isinstance(fmt, dict):
        return
    if fmt.get("type") == "json_object":
        req.json_mode = True
    elif fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        req.json_mode = True
        req.response_schema = schema if isinstance(schema, dict) else None


def _cache_prefixes(
    req: ParsedRequest,
    model: str,
    tools_text: str,
    tools_tokens: int,
    messages: list[Any],
    tokens: list[int],
) -> None:
    """Every message prefix of at least 1024 tokens is cacheable (tools come first)."""
    hasher = PrefixHasher(model)
    hasher.update(tools_text.encode())
    total = tools_tokens
    for msg, msg_tokens in zip(messages, tokens, strict=True):
        hasher.update(to_json(msg))
        total += msg_tokens
        if total >= OPENAI_CACHE_MIN_TOKENS:
            digest = hasher.checkpoint()
            req.cache_candidates.append((digest, total))
            req.cache_writes.append(digest)

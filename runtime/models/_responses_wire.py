"""The OpenAI Responses wire format: request bodies, replies, usage, stream assembly."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

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
    UserMessage,
)
from ..usage import Usage
from ._sse import SSE
from ._wire import ErrorEvent, Reply, json_object, text_field
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
from .media import image_url, require_vision
from .tiers import openai_fields, served_tier

PROVIDER = "openai"
# The key of `ModelOptions.provider_options` this adapter merges into its bodies (not
# "openai": Chat Completions fields would be refused here).
OPTIONS_KEY = "openai_responses"
ENCRYPTED_REASONING = "reasoning.encrypted_content"
_INCOMPLETE: dict[str | None, FinishReason] = {
    "max_output_tokens": "length",
    "content_filter": "refusal",
}
_FINAL_EVENTS = ("response.completed", "response.incomplete")
# Events whose content the final response object carries too: named by their SSE
# `event:` line, they are not parsed at all (a reply streams ~10 events, most of these).
_SKIPPED = frozenset(
    {
        "response.created",
        "response.in_progress",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_text.done",
        "response.output_item.done",
        "response.refusal.delta",
        "response.refusal.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.done",
        "response.function_call_arguments.done",
        # Built-in tools (kept whole, as provider blocks, from the final response) and
        # the text's annotations: never a client tool call, never text.
        "response.output_text.annotation.added",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.file_search_call.completed",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
        "response.mcp_call.failed",
        "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call_code.delta",
        "response.code_interpreter_call_code.done",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed",
    }
)


def request_body(
    model: str,
    messages: Sequence[Message],
    options: ModelOptions,
    capabilities: Capabilities,
    *,
    stream: bool,
    store: bool,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "input": [item for m in messages for item in _items(m, capabilities)],
        "store": store,
    }
    if options.temperature is not None and capabilities.temperature:
        body["temperature"] = options.temperature
    if options.max_tokens is not None:
        body["max_output_tokens"] = options.max_tokens
    if options.tools and capabilities.tools:
        body["tools"] = [_tool(t) for t in options.tools]
        if options.tool_choice is not None:
            body["tool_choice"] = options.tool_choice
    if options.response_schema is not None and capabilities.structured_output:
        schema = options.response_schema
        body["text"] = {
            "format": {
                "type": "json_schema",
                "name": schema.name,
                "schema": schema.json_schema,
                "strict": schema.strict,
            }
        }
    if capabilities.reasoning:
        if options.reasoning is not None:
            reasoning: dict[str, Any] = {"summary": "auto"}
            if options.reasoning.effort:
                reasoning["effort"] = options.reasoning.effort
            body["reasoning"] = reasoning
        if not store:
            # Nothing is kept server-side: the reasoning comes back encrypted, to be
            # replayed verbatim on the next trip.
            body["include"] = [ENCRYPTED_REASONING]
    body.update(openai_fields(options))
    if stream:
        body["stream"] = True
    body.update(options.provider_options.get(OPTIONS_KEY, {}))
    return body


def _tool(spec: ToolSpec) -> dict[str, Any]:
    # The Responses API makes a function strict unless told; Chat Completions does not.
    # An unset `strict` keeps the Chat Completions meaning.
    tool: dict[str, Any] = {
        "type": "function",
        "name": spec.name,
        "parameters": spec.parameters,
        "strict": bool(spec.strict),
    }
    if spec.description:
        tool["description"] = spec.description
    return tool


def _items(message: Message, capabilities: Capabilities) -> list[dict[str, Any]]:
    if isinstance(message, SystemMessage):
        return [{"role": "system", "content": message.text}]
    if isinstance(message, UserMessage):
        return [{"role": "user", "content": _user_content(message.content, capabilities)}]
    if isinstance(message, ToolMessage):
        output = {"type": "function_call_output", "call_id": message.call_id}
        return [{**output, "output": _tool_output(message, capabilities)}]
    return _assistant(message)


def _tool_output(message: ToolMessage, capabilities: Capabilities) -> str | list[dict[str, Any]]:
    """A tool result's text; `input_text` and `input_image` items when it holds images."""
    if not any(isinstance(p, ImagePart) for p in message.content):
        return message.text
    return _input_parts(message.content, capabilities)


def _user_content(
    parts: list[ContentPart], capabilities: Capabilities
) -> str | list[dict[str, Any]]:
    if all(isinstance(p, TextPart) for p in parts):
        return "".join(p.text for p in parts if isinstance(p, TextPart))
    return _input_parts(parts, capabilities)


def _input_parts(parts: list[ContentPart], capabilities: Capabilities) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            out.append({"type": "input_text", "text": part.text})
        elif isinstance(part, ImagePart):
            require_vision(capabilities)
            out.append({"type": "input_image", "image_url": image_url(part), "detail": "auto"})
    return out


def _assistant(message: AssistantMessage) -> list[dict[str, Any]]:
    """Reasoning items verbatim (encrypted content and all), the text, the calls. Other
    providers' blocks (Anthropic thinking) cannot be replayed here: dropped."""
    items: list[dict[str, Any]] = []
    for part in message.content:
        # A Chat Completions server's `thinking` (provider "openai" too) is no item here.
        if (
            isinstance(part, ProviderBlock)
            and part.provider == PROVIDER
            and part.kind != "thinking"
        ):
            items.append(dict(part.data))
    if message.text:
        items.append({"role": "assistant", "content": message.text})
    items.extend(
        {
            "type": "function_call",
            "call_id": call.call_id,
            "name": call.name,
            "arguments": call.arguments_text or "{}",
        }
        for call in message.tool_calls
    )
    return items


def usage_from(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage(requests=1)
    given = raw.get("input_tokens_details") or {}
    made = raw.get("output_tokens_details") or {}
    return Usage(
        requests=1,
        input_tokens=int(raw.get("input_tokens") or 0),
        output_tokens=int(raw.get("output_tokens") or 0),
        cached_tokens=int(given.get("cached_tokens") or 0),
        cache_write_tokens=int(given.get("cache_write_tokens") or 0),
        reasoning_tokens=int(made.get("reasoning_tokens") or 0),
        input_includes_cache=True,
    )


@dataclass
class ParsedReply:
    content: list[ContentPart]
    tool_calls: list[ToolCall]
    finish_reason: FinishReason
    refusal: str | None
    usage: Usage


def parse_response(data: dict[str, Any]) -> ParsedReply:
    """A response object (the body of a non-streamed reply, or what `response.completed`
    carries); KeyError/TypeError on a malformed one."""
    content: list[ContentPart] = []
    calls: list[ToolCall] = []
    text: list[str] = []
    refusal: list[str] = []
    for item in data["output"]:
        kind = item["type"]
        if kind == "message":
            for part in item["content"]:
                if part["type"] == "output_text":  # its annotations are not read
                    text.append(part["text"])
                elif part["type"] == "refusal":
                    refusal.append(part["refusal"])
        elif kind == "function_call":
            calls.append(ToolCall.parse(item["call_id"], item["name"], item["arguments"] or ""))
        else:
            # Reasoning, the built-in tools' calls (web_search_call, mcp_call,
            # code_interpreter_call...: run by OpenAI, never a client tool call) and any
            # item kind we do not read: kept verbatim, replayed on the next trip.
            content.append(ProviderBlock(provider=PROVIDER, kind=kind, data=item))
    if text:
        content.append(TextPart(text="".join(text)))
    refused = "".join(refusal) or None
    return ParsedReply(
        content=content,
        tool_calls=calls,
        finish_reason=_finish(data, refused, bool(calls)),
        refusal=refused,
        usage=usage_from(data.get("usage")),
    )


def _finish(data: dict[str, Any], refusal: str | None, has_calls: bool) -> FinishReason:
    status = data.get("status")
    if status == "incomplete":
        reason = (data.get("incomplete_details") or {}).get("reason")
        return _INCOMPLETE.get(reason, "error")
    if refusal:
        return "refusal"
    if status not in (None, "completed"):
        return "error"
    return "tool_calls" if has_calls else "stop"


def reply_of(data: dict[str, Any]) -> Reply:
    """A response object (a non-streamed reply, a batch line's, or what the stream's
    final event carries); a failed one raises `ErrorEvent`."""
    if data.get("status") == "failed":
        raise _failed(data)
    parsed = parse_response(data)
    return Reply(
        content=parsed.content,
        tool_calls=parsed.tool_calls,
        finish_reason=parsed.finish_reason,
        usage=parsed.usage,
        response_id=data.get("id"),
        model=data.get("model"),
        refusal=parsed.refusal,
        service_tier=served_tier(data.get("service_tier")),
    )


def _failed(data: dict[str, Any]) -> ErrorEvent:
    error = data.get("error")
    return ErrorEvent({"error": error if isinstance(error, dict) else {}})


@dataclass
class StreamState:
    """A streamed response (the skeleton's `StreamFeeder`): deltas as they come, the
    whole reply from the final event's response object."""

    calls: dict[int, tuple[str, str]] = field(default_factory=dict)  # output index: id, name
    final: Reply | None = None
    service_tier: str | None = None
    ended: bool = False

    def feed(self, event: SSE) -> list[StreamChunk]:
        if event.event in _SKIPPED:
            return []
        data = json_object(event.data) if event.data else {}
        kind = data.get("type") or event.event or ""
        if kind == "response.output_text.delta":
            return [TextDelta(text_field(data["delta"]))]
        if kind == "response.function_call_arguments.delta":
            index = data["output_index"]
            call_id, name = self.calls[index]
            return [ToolCallDelta(index, call_id, name, text_field(data["delta"]))]
        if kind == "response.reasoning_summary_text.delta":
            return [ReasoningDelta(text_field(data["delta"]))]
        if kind == "response.output_item.added":
            item = data["item"]
            if item["type"] == "function_call":
                index = data["output_index"]
                if not isinstance(index, int):
                    raise TypeError("an output index that is not an integer")
                self.calls[index] = (text_field(item["call_id"]), text_field(item["name"]))
        elif kind in _FINAL_EVENTS:
            final = data["response"]
            if not isinstance(final, dict):
                raise TypeError("a final response that is not an object")
            self.final = reply_of(final)
            self.service_tier, self.ended = self.final.service_tier, True
            return [UsageChunk(self.final.usage)]
        elif kind == "response.failed":
            raise _failed(data["response"])
        elif kind == "error":
            error = data.get("error") if isinstance(data.get("error"), dict) else data
            raise ErrorEvent({"error": error})
        return []

    def reply(self) -> Reply | None:
        return self.final

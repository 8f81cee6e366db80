"""The OpenAI Chat Completions wire format: request bodies, replies, stream assembly."""

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
    UsageChunk,
)
from .media import image_url, require_vision
from .tiers import openai_fields, served_tier

PROVIDER = "openai"

FINISH_REASONS: dict[str | None, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "refusal",
}


def request_body(
    model: str,
    messages: Sequence[Message],
    options: ModelOptions,
    capabilities: Capabilities,
    *,
    stream: bool,
    max_tokens_field: str,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": _messages(messages, capabilities),
    }
    if options.temperature is not None and capabilities.temperature:
        body["temperature"] = options.temperature
    if options.max_tokens is not None:
        body[max_tokens_field] = options.max_tokens
    if options.tools and capabilities.tools:
        body["tools"] = [
            _tool(t.name, t.description, t.parameters, t.strict) for t in options.tools
        ]
        if options.tool_choice is not None:
            body["tool_choice"] = options.tool_choice
    if options.response_schema is not None and capabilities.structured_output:
        schema = options.response_schema
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": schema.name,
                "schema": schema.json_schema,
                "strict": schema.strict,
            },
        }
    if options.reasoning is not None and options.reasoning.effort and capabilities.reasoning:
        body["reasoning_effort"] = options.reasoning.effort
    body.update(openai_fields(options))
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(options.provider_options.get(PROVIDER, {}))
    return body


def _tool(name: str, description: str, parameters: dict[str, Any], strict: bool | None) -> Any:
    function: dict[str, Any] = {"name": name, "parameters": parameters}
    if description:
        function["description"] = description
    if strict is not None:
        function["strict"] = strict
    return {"type": "function", "function": function}


def _messages(messages: Sequence[Message], capabilities: Capabilities) -> list[dict[str, Any]]:
    """The messages in order. A tool message carries text only on this wire: the images of
    a tool result go in a user message after the tool messages of the same turn (each
    call's answered first, as the wire requires), led by the call they come from."""
    out: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []
    for message in messages:
        if images and not isinstance(message, ToolMessage):
            out.append({"role": "user", "content": images})
            images = []
        out.append(_message(message, capabilities))
        if isinstance(message, ToolMessage):
            images.extend(_tool_images(message, capabilities))
    if images:
        out.append({"role": "user", "content": images})
    return out


def _tool_images(message: ToolMessage, capabilities: Capabilities) -> list[dict[str, Any]]:
    shown = [p for p in message.content if isinstance(p, ImagePart)]
    if not shown:
        return []
    require_vision(capabilities)
    name = f" ({message.name})" if message.name else ""
    lead = f"The image{'s' if len(shown) > 1 else ''} of tool call {message.call_id}{name}:"
    parts: list[dict[str, Any]] = [{"type": "text", "text": lead}]
    parts.extend({"type": "image_url", "image_url": {"url": image_url(p)}} for p in shown)
    return parts


def _tool_text(message: ToolMessage) -> str:
    count = sum(1 for p in message.content if isinstance(p, ImagePart))
    if not count:
        return message.text
    note = f"[{count} image{'s' if count > 1 else ''}: in the next user message]"
    return f"{message.text}\n{note}" if message.text else note


def _message(message: Message, capabilities: Capabilities) -> dict[str, Any]:
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": message.text}
    if isinstance(message, UserMessage):
        return {"role": "user", "content": _user_content(message.content, capabilities)}
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.call_id, "content": _tool_text(message)}
    return _assistant(message)


def _user_content(
    parts: list[ContentPart], capabilities: Capabilities
) -> str | list[dict[str, Any]]:
    if all(isinstance(p, TextPart) for p in parts):
        return "".join(p.text for p in parts if isinstance(p, TextPart))
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            out.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            require_vision(capabilities)
            out.append({"type": "image_url", "image_url": {"url": image_url(part)}})
    return out


def _assistant(message: AssistantMessage) -> dict[str, Any]:
    # Other providers' blocks (e.g. Anthropic thinking) cannot be replayed here: dropped.
    out: dict[str, Any] = {"role": "assistant", "content": message.text or None}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_text or "{}"},
            }
            for call in message.tool_calls
        ]
    return out


def usage_from(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage(requests=1)
    prompt = raw.get("prompt_tokens_details") or {}
    completion = raw.get("completion_tokens_details") or {}
    return Usage(
        requests=1,
        input_tokens=int(raw.get("prompt_tokens") or 0),
        output_tokens=int(raw.get("completion_tokens") or 0),
        cached_tokens=int(prompt.get("cached_tokens") or 0),
        reasoning_tokens=int(completion.get("reasoning_tokens") or 0),
        input_includes_cache=True,
    )


def finish_reason(raw: str | None, refusal: str | None) -> FinishReason:
    if refusal:
        return "refusal"
    return FINISH_REASONS.get(raw, "error" if raw else "stop")


@dataclass
class ParsedReply:
    text: str
    reasoning: str
    tool_calls: list[ToolCall]
    finish_reason: FinishReason
    refusal: str | None


def reply_of(data: dict[str, Any]) -> Reply:
    """A chat completion (a non-streamed reply, or a batch line's), its first choice."""
    parsed = parse_choice(data["choices"][0])
    state = StreamState(text=[parsed.text], reasoning=[parsed.reasoning])
    return Reply(
        content=state.content(),
        tool_calls=parsed.tool_calls,
        finish_reason=parsed.finish_reason,
        usage=usage_from(data.get("usage")),
        response_id=data.get("id"),
        model=data.get("model"),
        refusal=parsed.refusal,
        service_tier=served_tier(data.get("service_tier")),
    )


def content_parts(content: object) -> tuple[str, str]:
    """(text, reasoning) of a message's or a delta's `content`: a string, or a list of
    parts as some compatible servers send (Mistral: a `thinking` part, whose `thinking`
    is a string or a list of text parts, then `text` parts). Parts of other kinds (a
    reference, an image) carry no text of the reply. TypeError on another shape."""
    if content is None:
        return "", ""
    if isinstance(content, str):
        return content, ""
    if not isinstance(content, list):
        raise TypeError("content is neither a string nor a list of parts")
    text: list[str] = []
    reasoning: list[str] = []
    for part in content:
        if isinstance(part, str):
            text.append(part)
            continue
        kind = part["type"]
        if kind == "text":
            text.append(text_field(part["text"]))
        elif kind in ("thinking", "reasoning"):
            reasoning.append(content_parts(part.get(kind) or part.get("text"))[0])
    return "".join(text), "".join(reasoning)


def reasoning_field(message: dict[str, Any]) -> str:
    """`reasoning_content` (DeepSeek, vLLM) or `reasoning` (some others), when a string."""
    value = message.get("reasoning_content") or message.get("reasoning")
    return value if isinstance(value, str) else ""


def parse_choice(choice: dict[str, Any]) -> ParsedReply:
    """The first choice of a non-streamed reply (KeyError/TypeError on a malformed one)."""
    message = choice["message"]
    refusal = message.get("refusal")
    if refusal is not None:
        text_field(refusal)
    calls = [
        ToolCall.parse(c["id"], c["function"]["name"], c["function"].get("arguments") or "")
        for c in message.get("tool_calls") or ()
    ]
    text, reasoning = content_parts(message.get("content"))
    return ParsedReply(
        text=text,
        reasoning=reasoning_field(message) + reasoning,
        tool_calls=calls,
        finish_reason=finish_reason(choice.get("finish_reason"), refusal),
        refusal=refusal or None,
    )


@dataclass
class PendingCall:
    call_id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamState:
    """A streamed reply, assembled into what a non-streamed one would have said (the
    skeleton's `StreamFeeder`): chunks end with `[DONE]`."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    calls: dict[int, PendingCall] = field(default_factory=dict)
    finish: str | None = None
    response_id: str | None = None
    model: str | None = None
    usage: Usage | None = None
    service_tier: str | None = None
    ended: bool = False

    def feed(self, event: SSE) -> list[StreamChunk]:
        if event.data.strip() == "[DONE]":
            self.ended = True
            return []
        chunk = json_object(event.data)
        if chunk.get("error") is not None:
            raise ErrorEvent(chunk)
        out: list[StreamChunk] = []
        self.response_id = self.response_id or chunk.get("id")
        self.model = self.model or chunk.get("model")
        self.service_tier = served_tier(chunk.get("service_tier")) or self.service_tier
        if chunk.get("usage"):
            self.usage = usage_from(chunk["usage"])
            out.append(UsageChunk(self.usage))
        for choice in chunk.get("choices") or ():
            self._choice(choice, out)
        return out

    def _choice(self, choice: dict[str, Any], out: list[StreamChunk]) -> None:
        delta = choice.get("delta") or {}
        text, reasoning = content_parts(delta.get("content"))
        reasoning = reasoning_field(delta) + reasoning
        if reasoning:
            self.reasoning.append(reasoning)
            out.append(ReasoningDelta(reasoning))
        if text:
            self.text.append(text)
            out.append(TextDelta(text))
        if delta.get("refusal"):
            self.refusal.append(text_field(delta["refusal"]))
        for call in delta.get("tool_calls") or ():
            index = call["index"]
            if not isinstance(index, int):
                raise TypeError("a tool call index that is not an integer")
            pending = self.calls.setdefault(index, PendingCall())
            function = call.get("function") or {}
            pending.call_id = text_field(call.get("id") or pending.call_id)
            pending.name = text_field(function.get("name") or pending.name)
            fragment = text_field(function.get("arguments") or "")
            pending.arguments.append(fragment)
            out.append(ToolCallDelta(index, pending.call_id, pending.name, fragment))
        if choice.get("finish_reason"):
            self.finish = text_field(choice["finish_reason"])

    def reply(self) -> Reply | None:
        """The whole reply (None: the stream stopped before `[DONE]` or a finish)."""
        if not self.ended and self.finish is None:
            return None
        refusal = "".join(self.refusal) or None
        return Reply(
            content=self.content(),
            tool_calls=self.tool_calls(),
            finish_reason=finish_reason(self.finish, refusal),
            usage=self.usage or Usage(requests=1),
            response_id=self.response_id,
            model=self.model,
            refusal=refusal,
            service_tier=self.service_tier,
        )

    def content(self) -> list[ContentPart]:
        """Reasoning a compatible server sent (kept as a `thinking` block: it is not
        replayed on this wire), then the text."""
        out: list[ContentPart] = []
        reasoning = "".join(self.reasoning)
        if reasoning:
            block = {"type": "thinking", "thinking": reasoning}
            out.append(ProviderBlock(provider=PROVIDER, kind="thinking", data=block))
        text = "".join(self.text)
        if text:
            out.append(TextPart(text=text))
        return out

    def tool_calls(self) -> list[ToolCall]:
        return [
            ToolCall.parse(c.call_id, c.name, "".join(c.arguments))
            for _, c in sorted(self.calls.items())
        ]

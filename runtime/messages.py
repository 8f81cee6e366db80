"""The message model: one discriminated union for everything a conversation holds.

Messages cross actor boundaries and land in stores, so there is exactly one schema and
one adapter; JSON and msgpack are produced from the same definition.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import msgpack
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

__all__ = [
    "MESSAGE_TYPES",
    "AssistantMessage",
    "ContentPart",
    "ImagePart",
    "Message",
    "ProviderBlock",
    "SystemMessage",
    "TextPart",
    "ToolCall",
    "ToolMessage",
    "UserMessage",
    "messages_from_json",
    "messages_from_msgpack",
    "messages_to_json",
    "messages_to_msgpack",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class TextPart(BaseModel):
    """Plain text."""

    model_config = _FROZEN
    type: Literal["text"] = "text"
    text: str


class ImagePart(BaseModel):
    """An image given by exactly one of: a URL, base64 data with its media type, a local path."""

    model_config = _FROZEN
    type: Literal["image"] = "image"
    url: str | None = None
    data: str | None = None
    media_type: str | None = None
    path: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ImagePart:
        sources = [s for s in (self.url, self.data, self.path) if s is not None]
        if len(sources) != 1:
            raise ValueError("an image needs exactly one of url, data or path")
        if self.data is not None and not self.media_type:
            raise ValueError("base64 image data needs a media_type")
        return self


class ProviderBlock(BaseModel):
    """A provider's own content block (e.g. Anthropic thinking), kept verbatim for replay.

    `data` is the block exactly as the provider sent it; only the adapter named by
    `provider` reads it, and it sends it back unchanged.
    """

    model_config = _FROZEN
    type: Literal["provider"] = "provider"
    provider: str
    kind: str
    data: dict[str, Any]


ContentPart = Annotated[TextPart | ImagePart | ProviderBlock, Field(discriminator="type")]


def _as_parts(value: Any) -> Any:
    if isinstance(value, str):
        return [TextPart(text=value)] if value else []
    return value


def _text_of(parts: list[ContentPart]) -> str:
    return "".join(p.text for p in parts if isinstance(p, TextPart))


class ToolCall(BaseModel):
    """A tool call asked for by the model.

    `arguments_text` is what the model sent; `arguments` is its parse, or None when the
    text is not a JSON object (the agent loop reports that back to the model).
    """

    model_config = _FROZEN
    call_id: str
    name: str
    arguments_text: str = ""
    arguments: dict[str, Any] | None = None

    @classmethod
    def parse(cls, call_id: str, name: str, arguments_text: str) -> ToolCall:
        """Build a call from raw argument text, parsing it when it is a JSON object."""
        return cls(
            call_id=call_id,
            name=name,
            arguments_text=arguments_text,
            arguments=parse_arguments(arguments_text),
        )


def parse_arguments(text: str) -> dict[str, Any] | None:
    """Parse tool-call argument text; None when it is not a JSON object."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class _Message(BaseModel):
    model_config = _FROZEN
    content: list[ContentPart] = Field(default_factory=list)
    # Set by compaction: "summary" on a summary, "retained" on a kept turn whose signed
    # reasoning predates it. Never sent to a provider; left out of the JSON when unset,
    # so stored messages stay as they were.
    compaction: Literal["retained", "summary"] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )

    _coerce = field_validator("content", mode="before")(_as_parts)

    @property
    def text(self) -> str:
        """The text parts joined."""
        return _text_of(self.content)


class SystemMessage(_Message):
    """Instructions from the developer."""

    role: Literal["system"] = "system"


class UserMessage(_Message):
    """A user turn: text and images."""

    role: Literal["user"] = "user"


class AssistantMessage(_Message):
    """A model turn: text, provider blocks (thinking) and tool calls."""

    role: Literal["assistant"] = "assistant"
    tool_calls: list[ToolCall] = Field(default_factory=list)


class ToolMessage(_Message):
    """The result of one tool call, answering its `call_id`."""

    role: Literal["tool"] = "tool"
    call_id: str
    name: str | None = None
    is_error: bool = False


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="role"),
]

MESSAGE_TYPES = (SystemMessage, UserMessage, AssistantMessage, ToolMessage)
"""The classes of `Message`, for `isinstance`."""
MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)
MESSAGES_ADAPTER: TypeAdapter[list[Message]] = TypeAdapter(list[Message])


def messages_to_json(messages: list[Message]) -> bytes:
    """Serialise messages to JSON bytes."""
    return MESSAGES_ADAPTER.dump_json(messages)


def messages_from_json(data: bytes | str) -> list[Message]:
    """Parse messages from JSON (raises pydantic.ValidationError on malformed data)."""
    return MESSAGES_ADAPTER.validate_json(data)


def messages_to_msgpack(messages: list[Message]) -> bytes:
    """Serialise messages to msgpack from the same schema as JSON."""
    packed: bytes = msgpack.packb(MESSAGES_ADAPTER.dump_python(messages, mode="json"))
    return packed


def messages_from_msgpack(data: bytes) -> list[Message]:
    """Parse messages from msgpack (raises ValueError on malformed data)."""
    try:
        raw = msgpack.unpackb(data)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ValueError(f"not valid msgpack: {exc}") from exc
    return MESSAGES_ADAPTER.validate_python(raw)

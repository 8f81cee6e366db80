"""The model adapter contract: options in, a response or a stream of chunks out."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..abort import AbortSignal
from ..messages import AssistantMessage, ContentPart, Message, ProviderBlock, TextPart, ToolCall
from ..rates.limits import RateReading
from ..usage import Cost, Usage

__all__ = [
    "CacheControl",
    "Capabilities",
    "Done",
    "FinishReason",
    "Model",
    "ModelOptions",
    "ModelResponse",
    "ReasoningDelta",
    "ReasoningOptions",
    "ResponseSchema",
    "StreamChunk",
    "TextDelta",
    "ToolCallDelta",
    "ToolSpec",
    "UsageChunk",
]

FinishReason = Literal[
    "stop", "tool_calls", "length", "context_exceeded", "pause_turn", "refusal", "error"
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Capabilities(BaseModel):
    """What a model can do. Options a model lacks the capability for are never sent;
    images sent to a model without `vision` are refused before any request."""

    model_config = _FROZEN
    tools: bool = True
    structured_output: bool = True
    vision: bool = True
    reasoning: bool = False
    prompt_caching: bool = False
    temperature: bool = True


class ToolSpec(BaseModel):
    """A tool as the model sees it: a name, a description and a JSON schema."""

    model_config = _FROZEN
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    strict: bool | None = None


class ResponseSchema(BaseModel):
    """A JSON schema the reply must satisfy."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    name: str = "response"
    json_schema: dict[str, Any] = Field(alias="schema")
    strict: bool = True


class ReasoningOptions(BaseModel):
    model_config = _FROZEN
    effort: Literal["minimal", "low", "medium", "high"] | None = None
    max_tokens: int | None = None


_MAX_BREAKPOINTS = 4  # Anthropic's limit per request


class CacheControl(BaseModel):
    """Prompt-cache breakpoints and how long the cache lives (`ttl`: "5m" or "1h").

    `breakpoints` is a count (1 to 4) the adapter places, or explicit positions: "tools",
    "system", "last_message" or a message index. A count of n marks, in this order, the
    first n of: the end of the last turn (the whole prompt: the next trip reads it
    back), the end of the stable prefix (the last system block, else the last tool),
    the end of the user turn before the last one (what the previous trip wrote, read
    back even past Anthropic's 20-block lookback), and the last tool (kept when only the
    system prompt changes). An adapter without prompt caching ignores the option.
    """

    model_config = _FROZEN
    breakpoints: int | tuple[Literal["tools", "system", "last_message"] | int, ...] = (
        "tools",
        "system",
        "last_message",
    )
    ttl: Literal["5m", "1h"] = "5m"

    @field_validator("breakpoints", mode="before")
    @classmethod
    def _count_in_range(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError("a count or a list of positions, not a string")
        if isinstance(value, bool) or (
            isinstance(value, int) and not 1 <= value <= _MAX_BREAKPOINTS
        ):
            raise ValueError(
                f"a count must be 1 to {_MAX_BREAKPOINTS}"
                f" (Anthropic allows {_MAX_BREAKPOINTS}), not {value!r}"
            )
        return value


class ModelOptions(BaseModel):
    """Options for one request. `provider_options` is keyed by adapter name
    ("openai", "anthropic"); each adapter merges only its own key into the request body."""

    model_config = _FROZEN
    temperature: float | None = None
    max_tokens: int | None = None
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: Literal["auto", "required", "none"] | None = None
    response_schema: ResponseSchema | None = None
    reasoning: ReasoningOptions | None = None
    cache_control: CacheControl | None = None
    provider_options: dict[str, dict[str, Any]] = Field(default_factory=dict)


class ModelResponse(BaseModel):
    """One complete model reply, normalised across providers. `attempts` lists failed
    attempts before this reply (fallback models), each {model, provider, error}; a Ray
    model gateway that retried 429s lists every send, the answering one last, with more
    facts (attempt, ok, status, code, retry_after, wait, queued, duration)."""

    model_config = _FROZEN
    content: list[ContentPart] = Field(default_factory=list)
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: FinishReason
    usage: Usage
    response_id: str | None = None
    model: str | None = None
    provider: str
    refusal: str | None = None
    attempts: list[dict[str, Any]] = Field(default_factory=list)
    # How it came: None online; ("batch", provider batch id, seconds waited) by batch.
    via: tuple[Literal["batch"], str, float] | None = None
    # Set by a response cache (`raygent.ResponseCache`): "hit", served from it with no
    # request (`usage` counts the reply's tokens at no cost, `saved` what they cost
    # when paid), or "miss". Left out of the JSON when unset.
    cache: Literal["hit", "miss", "unavailable"] | None = Field(
        default=None, exclude_if=lambda v: v is None
    )
    saved: Cost | None = Field(default=None, exclude_if=lambda v: v is None)
    # What the reply's rate-limit headers said (`x-ratelimit-*`, `anthropic-ratelimit-*`,
    # retry-after). Left out of the JSON when unset.
    rate: RateReading | None = Field(default=None, exclude_if=lambda v: v is None)

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def blocks(self) -> list[ProviderBlock]:
        return [p for p in self.content if isinstance(p, ProviderBlock)]

    @property
    def message(self) -> AssistantMessage:
        """The reply as a message to append to the conversation."""
        return AssistantMessage(content=self.content, tool_calls=self.tool_calls)


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str
    type: Literal["reasoning"] = "reasoning"


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of a tool call's argument text; `index` orders calls within the reply."""

    index: int
    call_id: str
    name: str
    arguments_delta: str
    type: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, slots=True)
class UsageChunk:
    usage: Usage
    type: Literal["usage"] = "usage"


@dataclass(frozen=True, slots=True)
class Done:
    """The last chunk: the whole reply, as `complete()` would have returned it."""

    response: ModelResponse
    type: Literal["done"] = "done"


StreamChunk = TextDelta | ReasoningDelta | ToolCallDelta | UsageChunk | Done


@runtime_checkable
class Model(Protocol):
    """What the agent loop needs from a model."""

    @property
    def name(self) -> str: ...

    @property
    def provider(self) -> str: ...

    @property
    def capabilities(self) -> Capabilities: ...

    async def complete(
        self,
        messages: Sequence[Message],
        options: ModelOptions | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> ModelResponse: ...

    def stream(
        self,
        messages: Sequence[Message],
        options: ModelOptions | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> AsyncIterator[StreamChunk]: ...

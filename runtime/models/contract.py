"""The model adapter contract: options in, a response or a stream of chunks out."""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..abort import AbortSignal
from ..errors import ProviderError
from ..messages import AssistantMessage, ContentPart, Message, ProviderBlock, TextPart, ToolCall
from ..pricing import Pricing
from ..rates.limits import RateLimit, RateReading
from ..usage import Cost, Usage

__all__ = [
    "BatchModel",
    "CacheControl",
    "Capabilities",
    "CompositeModel",
    "Done",
    "FinishReason",
    "Limits",
    "LineOutcome",
    "LineResult",
    "Model",
    "ModelOptions",
    "ModelResponse",
    "ProviderModel",
    "ReasoningDelta",
    "ReasoningOptions",
    "ResponseSchema",
    "ServerCompaction",
    "StreamChunk",
    "TextDelta",
    "Tier",
    "ToolCallDelta",
    "ToolSpec",
    "UsageChunk",
    "as_batch_model",
    "as_composite",
    "as_provider_model",
    "parts_of",
    "with_failed",
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
    # The provider compacts the context itself (`ServerCompaction`): Anthropic's
    # `compact_20260112` edit on the models its reference lists.
    server_compaction: bool = False
    # The provider downloads an image given by URL itself (Bedrock does not: an image
    # attachment's URL is downloaded by raygent, under the outbound policy, and sent).
    image_urls: bool = True


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


class Tier(BaseModel):
    """A service tier to ask for, and the one to ask for when the provider refuses it for
    capacity: `Tier("flex", fallback="default")` sends a request at flex and, answered
    429 `resource_unavailable`, sends it again at the default tier (the trip's
    `attempts` keep the refusal; a batch report counts `tier_fallbacks`)."""

    model_config = _FROZEN
    tier: str
    fallback: str | None = None

    def __init__(self, tier: str, fallback: str | None = None) -> None:
        super().__init__(tier=tier, fallback=fallback)


_MIN_TRIGGER = 50_000  # Anthropic's minimum input-token trigger


class ServerCompaction(BaseModel):
    """Ask the provider to compact the context itself (Anthropic's server-side
    compaction, the `compact_20260112` edit of `context_management`).

    Once a request's input reaches `trigger` input tokens (Anthropic's default 150,000,
    at least 50,000), the provider summarises the conversation and puts the summary
    first in its reply as a `compaction` block; later requests send that block back
    verbatim and the provider reads nothing before it. `instructions` replace the
    provider's summarisation prompt. `pause_after_compaction`: the provider stops after
    the summary (`stop_reason` "compaction"), and the run sends the turn back to go on.
    """

    model_config = _FROZEN
    trigger: int = Field(default=150_000, ge=_MIN_TRIGGER)
    instructions: str | None = None
    pause_after_compaction: bool = False


class ModelOptions(BaseModel):
    """Options for one request. `provider_options` is keyed by adapter name
    ("openai", "anthropic"); each adapter merges only its own key into the request body.
    `service_tier` (a tier's name or a `Tier`) and the prompt-cache key and retention
    (OpenAI) override the model's own settings for this request."""

    model_config = _FROZEN
    temperature: float | None = None
    max_tokens: int | None = None
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: Literal["auto", "required", "none"] | None = None
    response_schema: ResponseSchema | None = None
    reasoning: ReasoningOptions | None = None
    cache_control: CacheControl | None = None
    service_tier: str | Tier | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    server_compaction: ServerCompaction | None = None
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
    # The service tier the provider says it used (OpenAI's `service_tier`, Anthropic's
    # `usage.service_tier`): what `usage` is priced at. Left out of the JSON when unset.
    service_tier: str | None = Field(default=None, exclude_if=lambda v: v is None)
    # The provider's usage per sampling iteration, when it reports one (Anthropic's
    # `usage.iterations`: a server-side compaction's own entry, then the reply's).
    iterations: list[dict[str, Any]] | None = Field(default=None, exclude_if=lambda v: v is None)
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


# -- what the request path asks of a model, declared ----------------------------------
# The core's request path (cache, budget, provider-batch lines, the access layer) reads
# these, never an undeclared attribute. Each protocol has methods only, so whether a
# model's class implements it is asked once per class (`_implements`), not per request.


@dataclass(frozen=True, slots=True)
class Limits:
    """The provider limits a model declares: `endpoint`, what its concurrency bound is
    shared by (provider, URL, key); `rate_key`, what its rate is held under (providers
    limit each model apart); `max_concurrency` (None: unbounded) and `rate_limit` (None:
    learnt from the replies)."""

    endpoint: Hashable
    rate_key: Hashable
    max_concurrency: int | None = None
    rate_limit: RateLimit | None = None


@runtime_checkable
class ProviderModel(Protocol):
    """A model that talks to a provider (raygent's HTTP adapters): its limits, the tier
    and pricing it declares, and the exact body it sends (what a cache keys on)."""

    def limits(self) -> Limits: ...

    def default_tier(self) -> str | Tier | None:
        """The service tier it asks for when a call's options name none."""
        ...

    def declared_pricing(self) -> Pricing | None: ...

    def request_body(
        self, messages: Sequence[Message], options: ModelOptions, *, stream: bool
    ) -> dict[str, Any]: ...


LineOutcome = Literal["succeeded", "errored", "expired", "cancelled"]


@dataclass(frozen=True, slots=True)
class LineResult:
    """One provider-batch line's outcome: the reply body, or the typed error an online
    call would raise."""

    custom_id: str
    outcome: LineOutcome
    body: dict[str, Any] | None = None
    error: ProviderError | None = None


@runtime_checkable
class BatchModel(Protocol):
    """A model whose requests may go as lines of its provider's batch API."""

    def batch_api(self) -> Any:
        """Its batch API (`raygent.models.batch_api.BatchAPI`), None if its endpoint has
        none."""
        ...

    def batch_reply(self, data: dict[str, Any]) -> ModelResponse: ...

    def batch_body(self, messages: Sequence[Message], options: ModelOptions) -> dict[str, Any]:
        """A line's request body: at the batch API's own tier and price, not streamed."""
        ...


@runtime_checkable
class CompositeModel(Protocol):
    """A model made of models (`raygent.fallback_model`): the request path splits it,
    once, and sends each model's attempt as a request of its own, in order, moving on
    while `fails_over` accepts the error."""

    def parts(self) -> Sequence[Model]: ...

    def fails_over(self, error: BaseException) -> bool: ...


class _Kind:
    """Whether a model's class implements `protocol`, asked once per class."""

    __slots__ = ("_known", "protocol")

    def __init__(self, protocol: type) -> None:
        self.protocol = protocol
        self._known: dict[type, bool] = {}

    def __call__(self, model: object) -> bool:
        cls = type(model)
        found = self._known.get(cls)
        if found is None:
            found = self._known[cls] = issubclass(cls, self.protocol)
        return found


_provider, _batchable, _composite = _Kind(ProviderModel), _Kind(BatchModel), _Kind(CompositeModel)


def as_provider_model(model: object) -> ProviderModel | None:
    """`model` as a `ProviderModel`, or None (a test double)."""
    return model if _provider(model) else None  # type: ignore[return-value]


def as_batch_model(model: object) -> BatchModel | None:
    return model if _batchable(model) else None  # type: ignore[return-value]


def as_composite(model: object) -> CompositeModel | None:
    return model if _composite(model) else None  # type: ignore[return-value]


def parts_of(model: Model) -> Sequence[Model]:
    """A composite model's models, else the model alone."""
    composite = as_composite(model)
    return (model,) if composite is None else composite.parts()


def with_failed(
    response: ModelResponse, attempts: Sequence[dict[str, Any]], failed: int | None = None
) -> ModelResponse:
    """`response` with `attempts` listed before its own on `attempts`, `failed` of them
    (all, by default) counted in its usage as requests billed at nothing: the books of a
    fallback's failed models, a tier refused for capacity and 429s sent again, kept once."""
    if not attempts:
        return response
    count = len(attempts) if failed is None else failed
    usage = response.usage
    usage = (
        usage + Usage(requests=count, cost=Cost())
        if usage.cost is not None
        else usage.model_copy(update={"requests": usage.requests + count})
    )
    return response.model_copy(update={"attempts": [*attempts, *response.attempts], "usage": usage})

"""Compaction: long runs stay inside a context window by summarising older messages.

`raygent.agent(..., compaction=raygent.Compaction(after_tokens=..., summarize=...))`.
Before each model trip the conversation, the tool definitions and the response schema
are counted (an offline estimate of ~4 characters a token, or `count_tokens`); above
`after_tokens`, a safe slice of older messages is handed to `summarize(slice, ctx)` and
replaced by the summary it returns (marked `compaction="summary"`; kept turns with signed
reasoning are marked `compaction="retained"`), unless it does not count smaller. Every
decision, applied or skipped, is recorded in `report.compactions`.

Never replaced: the original system messages, the run's input, the latest user message,
the last `keep` messages (widened to whole assistant / tool-result groups) and the open
tool round (its signed thinking goes back verbatim). With memory, a slice the store
already holds is replaced in the store too (`snapshot` / `replace_prefix`).

`summarize(model=..., max_tokens=...)` builds a summariser that asks a (cheaper) model.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .._message_input import as_message
from ..abort import AbortSignal
from ..errors import RaygentError
from ..messages import AssistantMessage, Message, SystemMessage, UserMessage
from ..models.contract import Model, ModelOptions
from ..seams.request import ModelRequest
from ..usage import Usage
from ._transcript import render_transcript

if TYPE_CHECKING:
    from ..seams.contract import ModelAccess

__all__ = [
    "Compaction",
    "CompactionContext",
    "CompactionRecord",
    "CompactionResult",
    "CountTokens",
    "SkipReason",
    "Summarizer",
    "SummaryError",
    "summarize",
]

Counting = Literal["estimate", "custom", "provider"]
SkipReason = Literal["no-safe-range", "not-smaller", "callback-error", "server-first"]
CountTokens = Callable[[list[Message], ModelOptions], "int | Awaitable[int]"]


@dataclass(frozen=True)
class CompactionContext:
    """What a summariser is told about the decision.

    `from_index` / `to_index` place the slice in the conversation (`to_index`
    exclusive); `models` is the run's model access (the provider's bound holds for the
    summariser's requests too); `signal` fires when the run is aborted.
    """

    trip_index: int
    input_tokens: int
    counting: Counting
    signal: AbortSignal
    from_index: int
    to_index: int
    models: ModelAccess | None = None


@dataclass(frozen=True)
class CompactionResult:
    """A summary replacing `conversation[replaces_from_index:replaces_to_index]`.

    The range must lie inside the slice offered (`ctx.from_index`..`ctx.to_index`) and
    keep assistant / tool-result groups whole; `summary` is a non-empty assistant text
    message (or its dict, e.g. `{"role": "assistant", "content": "..."}`). `usage`
    (optional) is recorded on the decision.
    """

    summary: AssistantMessage
    replaces_from_index: int
    replaces_to_index: int
    usage: Usage | None = None

    def __post_init__(self) -> None:
        # A summariser may give the summary as a message dict (any shape history takes).
        summary: Any = self.summary
        if isinstance(summary, Mapping):
            object.__setattr__(self, "summary", as_message(summary, "summary"))


Summarizer = Callable[
    [list[Message], CompactionContext], "CompactionResult | Awaitable[CompactionResult]"
]


@dataclass(frozen=True)
class Compaction:
    """When and how to compact. `count_tokens(messages, options)` (sync or async; e.g.
    `AnthropicModel.count_tokens`) replaces the offline estimate."""

    after_tokens: int
    summarize: Summarizer
    keep: int = 8
    count_tokens: CountTokens | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.after_tokens, int) or self.after_tokens <= 0:
            raise ValueError("after_tokens must be a positive int")
        if not isinstance(self.keep, int) or self.keep < 0:
            raise ValueError("keep must be a non-negative int")
        if not callable(self.summarize):
            raise TypeError("summarize must be a callable (slice, ctx) -> CompactionResult")
        if self.count_tokens is not None and not callable(self.count_tokens):
            raise TypeError("count_tokens must be a callable (messages, options) -> int")


class CompactionRecord(BaseModel):
    """One decision: the count that triggered it, and the range applied or why not.

    `kind` is "client" for this process's summaries (`Compaction`) and "server" for the
    provider's own (`ServerCompaction`): then `counting` is "provider", `input_tokens`
    the context it closed, `tokens_after` what the reply's turn read after it (their
    difference is what the provider says it saved) and `usage` the compaction's own
    iteration (also in the trip's usage: it is billed).

    `framing` is "user" when the summary went in as user context: it replaced the first
    turns, or kept turns carry signed reasoning; `retained` lists those kept turns
    (indices after compaction, each marked `compaction="retained"`).
    `stored`: the session's stored history was compacted too; `store_conflicts`: how
    many times another writer moved it first (each retried).
    """

    model_config = ConfigDict(extra="forbid")
    kind: Literal["client", "server"] = "client"
    trip_index: int
    counting: Counting
    input_tokens: int | None
    status: Literal["applied", "skipped"]
    reason: SkipReason | None = None
    replaces_from_index: int | None = None
    replaces_to_index: int | None = None
    framing: Literal["assistant", "user"] | None = None
    retained: list[int] = Field(default_factory=list)
    stored: bool = False
    store_conflicts: int = 0
    error: dict[str, Any] | None = None
    usage: Usage | None = None
    tokens_after: int | None = None


class SummaryError(RaygentError):
    """The summariser's model gave no usable summary (truncated, refused or empty)."""

    code = "COMPACTION_SUMMARY"
    category = "compaction"


DEFAULT_INSTRUCTIONS = (
    "You compact the history of a conversation between a user, an assistant and tools so "
    "that the assistant can continue it without the full transcript. Write a faithful, "
    "dense summary: the user's goals and constraints, facts learned, tool results that "
    "still matter (with exact values), decisions taken and why, and what is still open. "
    "Do not invent anything. Reply with the summary inside <summary></summary> tags."
)
_SUMMARY = re.compile(r"<summary>(.*?)</summary>", re.DOTALL)


def summarize(
    *,
    model: Model,
    max_tokens: int,
    instructions: str | None = None,
    on_usage: Callable[[Usage], Any] | None = None,
) -> Summarizer:
    """A summariser asking `model` (a cheaper one, typically) for a summary.

    The slice goes as a tagged transcript (text, tool calls, tool results; reasoning
    and provider blocks left out); the reply's text inside `<summary>` tags becomes the
    summary. A truncated, refused or empty reply raises SummaryError, so the decision is
    skipped. `on_usage(usage)` (sync or async) gets every reply's usage.
    """
    if max_tokens <= 0:
        raise ValueError("max_tokens must be positive")
    system = SystemMessage(content=instructions or DEFAULT_INSTRUCTIONS)
    options = ModelOptions(max_tokens=max_tokens)

    async def summarizer(history: list[Message], ctx: CompactionContext) -> CompactionResult:
        request: list[Message] = [system, UserMessage(content=render_transcript(history))]
        if ctx.models is not None:
            response = await ctx.models.complete(ModelRequest(model, request, options, ctx.signal))
        else:
            response = await model.complete(request, options, signal=ctx.signal)
        if on_usage is not None:
            told = on_usage(response.usage)
            if inspect.isawaitable(told):
                await told
        if response.finish_reason == "length":
            raise SummaryError("the summary was cut off by max_tokens", max_tokens=max_tokens)
        if response.finish_reason == "refusal":
            raise SummaryError(f"the summariser refused: {response.refusal or response.text}")
        text = summary_text(response.text)
        if not text:
            raise SummaryError("the summariser's reply has no <summary> text")
        return CompactionResult(
            summary=AssistantMessage(content=text),
            replaces_from_index=ctx.from_index,
            replaces_to_index=ctx.to_index,
            usage=response.usage,
        )

    return summarizer


def summary_text(reply: str) -> str:
    """The text inside the reply's `<summary>` tags (all of them, joined), stripped."""
    return "\n\n".join(part.strip() for part in _SUMMARY.findall(reply) if part.strip())


def check_result(result: object, offered: tuple[int, int], messages: Sequence[Message]) -> None:
    """Raise ValueError unless `result` is a usable answer for the slice `offered`."""
    if not isinstance(result, CompactionResult):
        raise ValueError(f"summarize returned {type(result).__name__}, not CompactionResult")
    summary = result.summary
    if not isinstance(summary, AssistantMessage) or summary.tool_calls:
        raise ValueError("the summary must be an assistant message without tool calls")
    if not summary.text.strip():
        raise ValueError("the summary is empty")
    start, end = result.replaces_from_index, result.replaces_to_index
    if not offered[0] <= start < end <= offered[1]:
        raise ValueError(f"range {start}..{end} is outside the slice offered {offered}")
    if messages[start].role == "tool" or (end < len(messages) and messages[end].role == "tool"):
        raise ValueError(f"range {start}..{end} splits a tool call from its results")

"""The compaction step before each model trip: count, pick a safe slice, summarise it,
replace it (in the store too, with memory), and record the decision.

A skipped decision leaves the conversation as it was and the run goes on; an abort
while counting or summarising ends the run as cancelled.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from itertools import takewhile
from typing import Any, TypeVar

from ..abort import abortable
from ..compaction._policy import (
    Compaction,
    CompactionContext,
    CompactionRecord,
    CompactionResult,
    Counting,
    SkipReason,
    check_result,
)
from ..compaction._range import has_signed_reasoning, safe_range
from ..compaction._store import StoredView, stored_view
from ..errors import RaygentError, redact
from ..messages import MESSAGE_ADAPTER, Message, UserMessage
from ._state import RunState

__all__ = ["compact_before_trip", "estimate_tokens"]

T = TypeVar("T")
CHARS_PER_TOKEN = 4
USER_FRAME = "[Context: a summary of the earlier part of this conversation]\n"


async def compact_before_trip(run: RunState, trip_index: int) -> None:
    """Compact the run's conversation if it counts above the threshold."""
    spec = run.config.compaction
    if spec is None:
        return
    counting: Counting = "custom" if spec.count_tokens is not None else "estimate"
    # Per-message sizes: the estimate's input, and what a slice weighs.
    weights = [_chars(m) for m in run.messages] if spec.count_tokens is None else None
    try:
        tokens = await _count(run, spec, weights)
    except Exception as exc:
        run.signal.raise_if_aborted()
        _skip(run, trip_index, counting, None, "callback-error", exc)
        return
    if tokens <= spec.after_tokens:
        return
    weights = weights or [_chars(m) for m in run.messages]
    view = await stored_view(run.saver, run.messages)
    offered = safe_range(
        run.messages,
        keep=spec.keep,
        protected=_protected(run),
        cuts=view.cuts if view is not None else (),
        weights=weights,
    )
    if offered is None:
        _skip(run, trip_index, counting, tokens, "no-safe-range")
        return
    ctx = CompactionContext(
        trip_index=trip_index,
        input_tokens=tokens,
        counting=counting,
        signal=run.signal,
        from_index=offered[0],
        to_index=offered[1],
        models=run.config.backend.models,
    )
    try:
        result = await _resolve(spec.summarize(run.messages[offered[0] : offered[1]], ctx), run)
        check_result(result, offered, run.messages)
    except Exception as exc:
        run.signal.raise_if_aborted()  # an abort is the run's end, not a skipped decision
        _skip(run, trip_index, counting, tokens, "callback-error", exc)
        return
    await _apply(run, trip_index, counting, tokens, result, weights, view)


async def _apply(
    run: RunState,
    trip_index: int,
    counting: Counting,
    tokens: int,
    result: CompactionResult,
    weights: list[int],
    view: StoredView | None,
) -> None:
    start, end = result.replaces_from_index, result.replaces_to_index
    retained = [start + 1 + k for k, m in enumerate(run.messages[end:]) if has_signed_reasoning(m)]
    # A summary in an assistant turn just before a signed turn would break that turn's
    # replay (providers merge adjacent assistant turns): it goes in as user context.
    summary: Message = result.summary
    if retained:
        summary = UserMessage(content=USER_FRAME + result.summary.text)
    if _chars(summary) >= sum(weights[start:end]):
        _skip(run, trip_index, counting, tokens, "not-smaller", usage=result)
        return
    stored, conflicts = (False, 0)
    if view is not None:
        stored, conflicts = await view.replace(start, end, summary)
    run.messages[start:end] = [summary]
    run.report.compactions.append(
        CompactionRecord(
            trip_index=trip_index,
            counting=counting,
            input_tokens=tokens,
            status="applied",
            replaces_from_index=start,
            replaces_to_index=end,
            framing="user" if retained else "assistant",
            retained=retained,
            stored=stored,
            store_conflicts=conflicts,
            usage=result.usage,
        )
    )


def estimate_tokens(run: RunState, weights: list[int] | None = None) -> int:
    """~4 characters a token over the JSON of the messages, tools and response schema."""
    chars = sum(weights if weights is not None else (_chars(m) for m in run.messages))
    options = run.config.options
    chars += sum(len(spec.model_dump_json()) for spec in options.tools)
    if options.response_schema is not None:
        chars += len(options.response_schema.model_dump_json())
    return -(-chars // CHARS_PER_TOKEN)


async def _count(run: RunState, spec: Compaction, weights: list[int] | None) -> int:
    if spec.count_tokens is None:
        return estimate_tokens(run, weights)
    tokens = await _resolve(spec.count_tokens(list(run.messages), run.config.options), run)
    if not isinstance(tokens, int) or isinstance(tokens, bool):
        raise TypeError(f"count_tokens returned {type(tokens).__name__}, not an int")
    return tokens


async def _resolve(value: T | Awaitable[T], run: RunState) -> T:
    """A callback's value, awaited (abortably) when it is awaitable."""
    if inspect.isawaitable(value):
        return await abortable(value, run.signal)
    return value


def _protected(run: RunState) -> set[int]:
    """Original system messages, the run's input, the latest user message."""
    # The input is what the run added before its first reply.
    inputs = {id(m) for m in takewhile(lambda m: m.role != "assistant", run.new_messages)}
    messages = run.messages
    protected = {k for k, m in enumerate(messages) if m.role == "system" or id(m) in inputs}
    # A summary framed as user context is not the user speaking: it may be replaced.
    users = [
        k for k, m in enumerate(messages) if m.role == "user" and not m.text.startswith(USER_FRAME)
    ]
    if users:
        protected.add(users[-1])
    return protected


def _chars(message: Message) -> int:
    return len(MESSAGE_ADAPTER.dump_json(message))


def _skip(
    run: RunState,
    trip_index: int,
    counting: Counting,
    tokens: int | None,
    reason: SkipReason,
    exc: Exception | None = None,
    usage: CompactionResult | None = None,
) -> None:
    run.report.compactions.append(
        CompactionRecord(
            trip_index=trip_index,
            counting=counting,
            input_tokens=tokens,
            status="skipped",
            reason=reason,
            error=None if exc is None else _error(exc),
            usage=None if usage is None else usage.usage,
        )
    )


def _error(exc: Exception) -> dict[str, Any]:
    if isinstance(exc, RaygentError):
        return exc.to_dict()
    return {"type": type(exc).__name__, "message": redact(str(exc))}

"""The compaction step before each model trip: count, pick a safe slice, summarise it,
replace it (in the store too, with memory), and record the decision; and the record of a
compaction the provider made during a trip (`ServerCompaction`).

A skipped decision leaves the conversation as it was and the run goes on; an abort
while counting or summarising ends the run as cancelled.

With both, the server compacts first: the client step counts what is sent (the provider
reads nothing before the latest compaction block, so neither does the estimate) and,
while that reaches the server's trigger, leaves it to the provider (a "server-first"
skip). Below it, and above its own `after_tokens`, it summarises as without the server,
never the compaction block's turn or anything before it.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from itertools import takewhile
from typing import Any, Literal, TypeVar

from ..abort import abortable
from ..compaction.policy import (
    CompactionContext,
    CompactionRecord,
    CompactionResult,
    Counting,
    CountTokens,
    SkipReason,
    check_result,
)
from ..compaction.ranges import has_signed_reasoning, safe_range
from ..compaction.stored import StoredView, stored_view
from ..errors import error_dict
from ..messages import MESSAGE_ADAPTER, AssistantMessage, Message, ProviderBlock, UserMessage
from ..models.contract import ModelResponse
from ..usage import Usage
from ._state import RunState

__all__ = ["compact_before_trip", "estimate_tokens", "record_server_compaction"]

T = TypeVar("T")
CHARS_PER_TOKEN = 4
USER_FRAME = "Summary of earlier conversation:\n"


async def compact_before_trip(run: RunState, trip_index: int) -> None:
    """Compact the run's conversation if it counts above the threshold."""
    spec = run.config.compaction
    if spec is None:
        return
    counting: Counting = "custom" if spec.count_tokens is not None else "estimate"
    sent = compaction_index(run.messages)
    # Per-message sizes: the estimate's input, and what a slice weighs.
    weights = _weights(run.messages, sent) if spec.count_tokens is None else None
    try:
        if spec.count_tokens is None:
            tokens = estimate_tokens(run, weights)
        else:
            tokens = await _count(run, spec.count_tokens, run.messages)
    except Exception as exc:
        run.signal.raise_if_aborted()
        _skip(run, trip_index, counting, None, "callback-error", exc)
        return
    if tokens <= spec.after_tokens:
        return
    server = run.config.options.server_compaction
    if server is not None and tokens >= server.trigger:
        _skip(run, trip_index, counting, tokens, "server-first")
        return
    weights = weights or _weights(run.messages, sent)
    view = await stored_view(run.saver, run.messages)
    offered = safe_range(
        run.messages,
        keep=spec.keep,
        protected=_protected(run) | set(range(sent + 1)),
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
        models=run.config.models(),  # its calls held as the run's (cache, budgets)
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
    messages = run.messages
    start, end = result.replaces_from_index, result.replaces_to_index
    signed = [k for k in range(end, len(messages)) if has_signed_reasoning(messages[k])]
    # An assistant summary just before a signed turn would break that turn's replay
    # (providers merge adjacent assistant turns), and one first would make the
    # transcript start with the assistant: it goes in as user context then.
    first = all(m.role == "system" for m in messages[:start])
    summary = _framed(result.summary, user=bool(signed) or first)
    kept = list(messages[end:])
    for k in signed:
        kept[k - end] = _marked(messages[k], "retained")
    proposed = [*messages[:start], summary, *kept]
    try:
        smaller = await _smaller(run, tokens, proposed, weights, (start, end), signed)
    except Exception as exc:
        run.signal.raise_if_aborted()
        _skip(run, trip_index, counting, tokens, "callback-error", exc, result)
        return
    if not smaller:
        _skip(run, trip_index, counting, tokens, "not-smaller", usage=result)
        return
    stored, conflicts = (False, 0)
    if view is not None:
        stored, conflicts = await view.replace(start, end, [summary, *kept])
    _remark(run, {id(messages[k]): kept[k - end] for k in signed})
    run.messages[start:] = [summary, *kept]
    run.report.compactions.append(
        CompactionRecord(
            trip_index=trip_index,
            counting=counting,
            input_tokens=tokens,
            status="applied",
            replaces_from_index=start,
            replaces_to_index=end,
            framing="assistant" if summary.role == "assistant" else "user",
            retained=[start + 1 + k - end for k in signed],
            stored=stored,
            store_conflicts=conflicts,
            usage=result.usage,
        )
    )


def _framed(summary: AssistantMessage, *, user: bool) -> Message:
    """The summary as it goes into the conversation, marked as one."""
    if user:
        return UserMessage(content=USER_FRAME + summary.text, compaction="summary")
    return summary.model_copy(update={"compaction": "summary"})


def _marked(message: Message, marker: Literal["retained", "summary"]) -> Message:
    if message.compaction == marker:
        return message
    return message.model_copy(update={"compaction": marker})


async def _smaller(
    run: RunState,
    tokens: int,
    proposed: list[Message],
    weights: list[int],
    replaced: tuple[int, int],
    signed: list[int],
) -> bool:
    """Whether the proposed conversation counts below the current one, by the counter
    that made the decision (the custom one, or the estimate)."""
    counter = run.config.compaction.count_tokens if run.config.compaction else None
    if counter is not None:
        return await _count(run, counter, proposed) < tokens
    start, end = replaced
    added = sum(_chars(proposed[start + 1 + k - end]) - weights[k] for k in signed)
    return _chars(proposed[start]) + added < sum(weights[start:end])


def _remark(run: RunState, marked: dict[int, Message]) -> None:
    """Kept turns newly marked are saved marked, when they have not been saved yet."""
    if not marked:
        return
    run.new_messages[:] = [marked.get(id(m), m) for m in run.new_messages]
    if run.saver is not None:
        run.saver.remark(marked)


def estimate_tokens(run: RunState, weights: list[int] | None = None) -> int:
    """~4 characters a token over the JSON of the messages, tools and response schema."""
    chars = sum(weights if weights is not None else (_chars(m) for m in run.messages))
    options = run.config.options
    chars += sum(len(spec.model_dump_json()) for spec in options.tools)
    if options.response_schema is not None:
        chars += len(options.response_schema.model_dump_json())
    return -(-chars // CHARS_PER_TOKEN)


async def _count(run: RunState, counter: CountTokens, messages: list[Message]) -> int:
    """The custom counter's count of `messages` (with the run's tools and schema)."""
    tokens = await _resolve(counter(list(messages), run.config.options), run)
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
    users = [k for k, m in enumerate(messages) if m.role == "user" and m.compaction is None]
    if users:
        protected.add(users[-1])
    return protected


def _chars(message: Message) -> int:
    return len(MESSAGE_ADAPTER.dump_json(message))


def _weights(messages: list[Message], sent: int) -> list[int]:
    """Each message's size; 0 for those before the latest compaction block (unsent)."""
    return [_chars(m) if k >= sent or m.role == "system" else 0 for k, m in enumerate(messages)]


def _is_compaction(part: object) -> bool:
    return isinstance(part, ProviderBlock) and part.kind == "compaction"


def compaction_index(messages: list[Message]) -> int:
    """The index of the turn holding the latest server compaction block (-1: none)."""
    for k in range(len(messages) - 1, -1, -1):
        if any(_is_compaction(p) for p in messages[k].content):
            return k
    return -1


def record_server_compaction(run: RunState, trip_index: int, response: ModelResponse) -> None:
    """Report a compaction the provider made during the trip (its block is in the
    reply), with what the provider says it closed and what the turn read after it."""
    if not any(_is_compaction(p) for p in response.content):
        return
    iterations = response.iterations or []
    closed = next((i for i in iterations if i.get("type") == "compaction"), None)
    after = next((i for i in reversed(iterations) if i.get("type") == "message"), None)
    run.report.compactions.append(
        CompactionRecord(
            kind="server",
            trip_index=trip_index,
            counting="provider",
            input_tokens=_input_of(closed),
            status="applied",
            usage=None if closed is None else _iteration_usage(closed),
            tokens_after=_input_of(after),
        )
    )


def _input_of(iteration: dict[str, Any] | None) -> int | None:
    if iteration is None:
        return None
    keys = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    return sum(int(iteration.get(key) or 0) for key in keys)


def _iteration_usage(iteration: dict[str, Any]) -> Usage:
    return Usage(
        input_tokens=int(iteration.get("input_tokens") or 0),
        output_tokens=int(iteration.get("output_tokens") or 0),
        cached_tokens=int(iteration.get("cache_read_input_tokens") or 0),
        cache_write_tokens=int(iteration.get("cache_creation_input_tokens") or 0),
        input_includes_cache=False,
    )


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
            error=None if exc is None else error_dict(exc),
            usage=None if usage is None else usage.usage,
        )
    )

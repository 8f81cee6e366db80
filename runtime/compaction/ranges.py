"""Where a compaction may cut: the safe slice of older messages, or none.

A slice never holds a protected message (original system messages, the run's input, the
latest user message), never crosses a cut (the end of what the store holds), starts and
ends on whole assistant / tool-result groups, and ends before the last `keep` messages
and before the open tool round.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ..messages import AssistantMessage, Message, ProviderBlock

__all__ = ["has_signed_reasoning", "safe_range"]

MIN_SLICE = 2  # replacing one message by one summary rarely pays, and would loop


def safe_range(
    messages: Sequence[Message],
    *,
    keep: int,
    protected: Collection[int],
    cuts: Collection[int] = (),
    weights: Sequence[int],
) -> tuple[int, int] | None:
    """The heaviest safe slice `(start, end)` (end exclusive), or None."""
    limit = _group_start(messages, max(0, len(messages) - keep))
    open_round = _open_round(messages)
    if open_round is not None:
        limit = min(limit, open_round)
    best: tuple[int, int] | None = None
    best_weight = -1
    for start, end in _segments(limit, protected, cuts):
        start, end = _aligned(messages, start, end)
        if end - start < MIN_SLICE:
            continue
        weight = sum(weights[start:end])
        if weight > best_weight:
            best, best_weight = (start, end), weight
    return best


def has_signed_reasoning(message: Message) -> bool:
    """An assistant turn carrying reasoning a provider signed (it must go back verbatim,
    and first in its turn)."""
    return isinstance(message, AssistantMessage) and any(
        isinstance(part, ProviderBlock)
        and (
            part.kind == "redacted_thinking"
            or "signature" in part.data
            or "encrypted_content" in part.data
        )
        for part in message.content
    )


def _segments(
    limit: int, protected: Collection[int], cuts: Collection[int]
) -> list[tuple[int, int]]:
    """Maximal runs of unprotected indices below `limit`, split at each cut."""
    found: list[tuple[int, int]] = []
    start: int | None = None
    for index in range(limit):
        if index in protected or index in cuts:
            if start is not None:
                found.append((start, index))
            start = None if index in protected else index
        elif start is None:
            start = index
    if start is not None:
        found.append((start, limit))
    return found


def _aligned(messages: Sequence[Message], start: int, end: int) -> tuple[int, int]:
    """Shrink to whole groups: no tool result without its call, no call without its
    results."""
    while start < end and messages[start].role == "tool":
        start += 1
    while end > start and end < len(messages) and messages[end].role == "tool":
        end -= 1
    return start, end


def _group_start(messages: Sequence[Message], index: int) -> int:
    """The start of the group holding `index` (tool results belong to their call)."""
    while 0 < index < len(messages) and messages[index].role == "tool":
        index -= 1
    return index


def _open_round(messages: Sequence[Message]) -> int | None:
    """The assistant turn the next trip answers (its tool results) or continues (a
    paused turn, last in the conversation), if any."""
    index = len(messages) - 1
    while index >= 0 and messages[index].role in ("tool", "user"):
        index -= 1
    if index < 0:
        return None
    message = messages[index]
    if isinstance(message, AssistantMessage) and (message.tool_calls or index == len(messages) - 1):
        return index
    return None

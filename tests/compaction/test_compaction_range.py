"""The safe slice on its own: groups, cuts, protected messages, keep, the open round."""

from __future__ import annotations

from raygent import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage
from raygent.compaction.ranges import safe_range


def group(n: int, calls: int = 1) -> list[Message]:
    ids = [f"c{n}_{k}" for k in range(calls)]
    turn = AssistantMessage(tool_calls=[ToolCall.parse(i, "lookup", "{}") for i in ids])
    return [turn, *(ToolMessage(call_id=i, content="r") for i in ids)]


def plan(messages: list[Message], keep: int = 0, protected=(), cuts=()) -> tuple[int, int] | None:
    return safe_range(
        messages, keep=keep, protected=set(protected), cuts=cuts, weights=[1] * len(messages)
    )


def test_a_cut_inside_a_group_never_splits_a_call_from_its_results() -> None:
    messages = [SystemMessage(content="s"), UserMessage(content="u"), *group(1, 2), *group(2)]
    messages.append(AssistantMessage(content="answer"))
    messages.append(UserMessage(content="next"))
    # The stored part ends between the first call and its second result.
    assert plan(messages, protected={0, 1, 8}, cuts={4}) == (5, 8)
    assert plan(messages, protected={0, 1, 8}) == (2, 8)


def test_the_heaviest_segment_between_protected_messages_wins() -> None:
    older = [UserMessage(content="old"), AssistantMessage(content="old answer")]
    messages = [SystemMessage(content="s"), *older, UserMessage(content="input")]
    messages += [*group(1), *group(2), AssistantMessage(content="{bad"), UserMessage(content="fix")]
    weights = [1, 1, 1, 1, 5, 5, 5, 5, 1, 1]
    found = safe_range(messages, keep=0, protected={0, 3, 9}, cuts=(), weights=weights)
    assert found == (4, 9)
    weights = [1, 50, 50, 1, 5, 5, 5, 5, 1, 1]
    found = safe_range(messages, keep=0, protected={0, 3, 9}, cuts=(), weights=weights)
    assert found == (1, 3)


def test_keep_and_the_open_round_bound_the_slice() -> None:
    messages = [SystemMessage(content="s"), UserMessage(content="u")]
    messages += [*group(1), *group(2, 3), *group(3)]  # 2..3, 4..7, 8..9
    assert plan(messages, keep=0, protected={0, 1}) == (2, 8)  # the open round (8..9) stays
    assert plan(messages, keep=2, protected={0, 1}) == (2, 8)
    assert plan(messages, keep=3, protected={0, 1}) == (2, 4)  # widened to 4..9
    assert plan(messages, keep=6, protected={0, 1}) == (2, 4)
    assert plan(messages, keep=7, protected={0, 1}) is None  # widened to 2..9


def test_one_message_is_never_a_slice() -> None:
    messages = [UserMessage(content="u"), AssistantMessage(content="a"), UserMessage(content="v")]
    assert plan(messages, protected={0, 2}) is None


def test_a_paused_turn_last_in_the_conversation_is_the_open_round() -> None:
    messages = [SystemMessage(content="s"), UserMessage(content="u"), *group(1), *group(2)]
    messages.append(AssistantMessage(content="thinking it over (paused)"))
    assert plan(messages, protected={0, 1}) == (2, 6)

"""Messages given as dicts (OpenAI chat shape, Anthropic content blocks, raygent's own)
are read into raygent messages; anything else is an InvalidOptionsError naming where."""

from __future__ import annotations

from typing import Any

import pytest

from raygent._message_input import as_message, as_messages
from raygent.compaction import CompactionResult
from raygent.compaction.policy import check_result
from raygent.errors import InvalidOptionsError
from raygent.messages import (
    MESSAGES_ADAPTER,
    AssistantMessage,
    ImagePart,
    ProviderBlock,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)

OPENAI_HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is on this picture, and 2+3?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        ],
        "name": "alice",
    },
    {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "5"},
    {"role": "assistant", "content": "A cat, and 5."},
]


def test_openai_shaped_dicts_become_raygent_messages() -> None:
    messages = as_messages(OPENAI_HISTORY, "history")
    assert messages == [
        SystemMessage(content="Be brief."),
        SystemMessage(content="Use tools."),
        UserMessage(
            content=[
                TextPart(text="What is on this picture, and 2+3?"),
                ImagePart(data="iVBORw0K", media_type="image/png"),
                ImagePart(url="https://example.com/a.png"),
            ]
        ),
        AssistantMessage(
            tool_calls=[ToolCall.parse("call_1", "add", '{"a": 2, "b": 3}')],
        ),
        ToolMessage(call_id="call_1", name="add", content="5"),
        AssistantMessage(content="A cat, and 5."),
    ]


ANTHROPIC_HISTORY: list[dict[str, Any]] = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Look:", "cache_control": {"type": "ephemeral"}},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"},
            },
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Two lookups.", "signature": "sig-1"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "a"}},
            {"type": "tool_use", "id": "toolu_2", "name": "lookup", "input": {"q": "b"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "found a"},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "content": [{"type": "text", "text": "no b"}],
                "is_error": True,
            },
            {"type": "text", "text": "And then?"},
        ],
    },
]


def test_anthropic_content_blocks_become_raygent_messages() -> None:
    messages = as_messages(ANTHROPIC_HISTORY, "history")
    thinking = {"type": "thinking", "thinking": "Two lookups.", "signature": "sig-1"}
    assert messages == [
        UserMessage(
            content=[TextPart(text="Look:"), ImagePart(data="/9j/4AAQ", media_type="image/jpeg")]
        ),
        AssistantMessage(
            content=[
                ProviderBlock(provider="anthropic", kind="thinking", data=thinking),
                TextPart(text="Checking."),
            ],
            tool_calls=[
                ToolCall(
                    call_id="toolu_1",
                    name="lookup",
                    arguments_text='{"q": "a"}',
                    arguments={"q": "a"},
                ),
                ToolCall(
                    call_id="toolu_2",
                    name="lookup",
                    arguments_text='{"q": "b"}',
                    arguments={"q": "b"},
                ),
            ],
        ),
        # One tool message per result, then the rest of the user turn.
        ToolMessage(call_id="toolu_1", name="lookup", content="found a"),
        ToolMessage(call_id="toolu_2", name="lookup", content="no b", is_error=True),
        UserMessage(content="And then?"),
    ]


def test_raygent_message_dicts_round_trip() -> None:
    messages = as_messages(OPENAI_HISTORY, "history") + as_messages(ANTHROPIC_HISTORY, "history")
    dumped = MESSAGES_ADAPTER.dump_python(messages, mode="json")
    assert as_messages(dumped, "history") == messages
    # Messages pass through untouched, mixed with dicts.
    assert as_messages([messages[0], dumped[1]], "history") == messages[:2]


def test_a_summary_dict_is_one_message() -> None:
    summary = as_message({"role": "assistant", "content": "Earlier: a cat."}, "summary")
    assert summary == AssistantMessage(content="Earlier: a cat.")
    with pytest.raises(InvalidOptionsError, match="summary: expected one message, got 3"):
        as_message(ANTHROPIC_HISTORY[2], "summary")


@pytest.mark.parametrize(
    ("history", "where", "says"),
    [
        ("hello", "history must be a list", "not str"),
        (42, "history must be a list", "not int"),
        ({"role": "user", "content": "hi"}, "history must be a list", "not dict"),
        ([{"role": "user", "content": "ok"}, 7], "history[1]", "not int"),
        ([{"role": "robot", "content": "beep"}], "history[0]", "unknown role 'robot'"),
        ([{"content": "who?"}], "history[0]", "needs a role"),
        ([{"role": "user", "content": 3}], "history[0]", "content must be a str or a list"),
        ([{"role": "user", "content": ["hi"]}], "history[0]", "a content part must be a dict"),
        ([{"role": "user", "content": [{"type": "audio"}]}], "history[0]", "'audio'"),
        ([{"role": "user", "content": "hi", "mood": "x"}], "history[0]", "mood"),
        ([{"role": "tool", "content": "5"}], "history[0]", "needs a tool_call_id"),
        (
            [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}],
            "history[0]",
            "tool_calls[0] has no function name",
        ),
        ([{"role": "assistant", "tool_calls": "add"}], "history[0]", "tool_calls must be a list"),
        (
            [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "input": {}}]}],
            "history[0]",
            "tool_use block has no name",
        ),
        (
            [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}],
            "history[0]",
            "needs a tool_use_id",
        ),
        (
            [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}],
            "history[0]",
            "unknown image source type 'file'",
        ),
    ],
)
def test_anything_else_is_an_invalid_options_error_naming_where(
    history: Any, where: str, says: str
) -> None:
    with pytest.raises(InvalidOptionsError) as raised:
        as_messages(history, "history")
    message = str(raised.value)
    assert message.startswith(where), message
    assert says in message
    assert raised.value.details["option"] == "history"
    if "[" in where:
        assert raised.value.details["index"] == int(where.split("[")[1].rstrip("]"))


def test_a_compaction_summary_may_be_a_message_dict() -> None:
    result = CompactionResult(
        summary={"role": "assistant", "content": "Earlier: a cat."},  # type: ignore[arg-type]
        replaces_from_index=1,
        replaces_to_index=3,
    )
    assert result.summary == AssistantMessage(content="Earlier: a cat.")
    conversation = as_messages(OPENAI_HISTORY, "history")
    check_result(result, (1, 4), conversation)  # a usable answer
    with pytest.raises(InvalidOptionsError, match="summary: unknown role 'narrator'"):
        CompactionResult(
            summary={"role": "narrator", "content": "x"},  # type: ignore[arg-type]
            replaces_from_index=1,
            replaces_to_index=3,
        )


def test_the_reference_replay_form_keeps_the_blocks_before_the_text() -> None:
    thinking = ProviderBlock(
        provider="anthropic", kind="thinking", data={"type": "thinking", "thinking": "t"}
    )
    as_object, as_dict = as_messages(
        [
            {"role": "assistant", "content": "final", "blocks": [thinking]},
            {"role": "assistant", "content": "final", "blocks": [thinking.model_dump()]},
        ],
        "history",
    )
    for message in (as_object, as_dict):
        assert isinstance(message, AssistantMessage)
        assert message.content == [thinking, TextPart(text="final")]
    with pytest.raises(InvalidOptionsError, match=r"history\[0\]: blocks\[0\]"):
        as_messages([{"role": "assistant", "content": "x", "blocks": ["nope"]}], "history")

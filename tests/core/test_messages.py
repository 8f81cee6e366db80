"""Every message shape round-trips losslessly through JSON and msgpack."""

from __future__ import annotations

import json

import msgpack
import pytest
from pydantic import ValidationError
from shared_support import MESSAGE_SHAPES, REDACTED, THINKING

from raygent import (
    AssistantMessage,
    ImagePart,
    ProviderBlock,
    TextPart,
    ToolCall,
    UserMessage,
)
from raygent.messages import (
    MESSAGE_ADAPTER,
    messages_from_json,
    messages_from_msgpack,
    messages_to_json,
    messages_to_msgpack,
)

SHAPES = MESSAGE_SHAPES


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_round_trips_through_json(name: str) -> None:
    message = SHAPES[name]
    assert messages_from_json(messages_to_json([message])) == [message]
    assert MESSAGE_ADAPTER.validate_json(MESSAGE_ADAPTER.dump_json(message)) == message


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_round_trips_through_msgpack(name: str) -> None:
    message = SHAPES[name]
    restored = messages_from_msgpack(messages_to_msgpack([message]))
    assert restored == [message]
    assert type(restored[0]) is type(message)


def test_a_whole_conversation_round_trips_in_order() -> None:
    conversation = [SHAPES[n] for n in sorted(SHAPES)]
    assert messages_from_json(messages_to_json(conversation)) == conversation
    assert messages_from_msgpack(messages_to_msgpack(conversation)) == conversation


def test_provider_blocks_are_kept_verbatim() -> None:
    data = messages_to_msgpack([SHAPES["assistant-thinking"]])
    [restored] = messages_from_msgpack(data)
    assert isinstance(restored, AssistantMessage)
    assert [b.data for b in restored.content if isinstance(b, ProviderBlock)] == [
        THINKING,
        REDACTED,
    ]


def test_tool_call_arguments_are_parsed_or_none() -> None:
    good = ToolCall.parse("c", "f", '{"x": 1}')
    assert good.arguments == {"x": 1}
    assert good.arguments_text == '{"x": 1}'
    assert ToolCall.parse("c", "f", "").arguments == {}
    assert ToolCall.parse("c", "f", "[1, 2]").arguments is None
    assert ToolCall.parse("c", "f", '{"x": ').arguments is None


def test_text_joins_text_parts_only() -> None:
    assert SHAPES["assistant-thinking"].text == "4"
    assert SHAPES["user-multipart"].text == "look: twice"


def test_strings_become_text_parts() -> None:
    assert UserMessage(content="hi").content == [TextPart(text="hi")]
    assert UserMessage(content="").content == []


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"url": "https://x", "path": "./y"}, {"data": "AAAA"}],
    ids=["no-source", "two-sources", "data-without-media-type"],
)
def test_an_image_needs_exactly_one_source(kwargs: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        ImagePart(**kwargs)


def test_malformed_stored_data_is_a_clear_error() -> None:
    with pytest.raises(ValidationError):
        messages_from_json(b'[{"role": "wizard", "content": []}]')
    with pytest.raises(ValidationError):
        messages_from_json(b'[{"role": "tool", "content": []}]')  # no call_id
    with pytest.raises(ValueError):
        messages_from_msgpack(b"\xc1\xc1 not msgpack")
    with pytest.raises(ValidationError):
        messages_from_msgpack(msgpack.packb([{"role": "user", "content": 5}]))


def test_unknown_fields_are_refused() -> None:
    raw = json.dumps([{"role": "user", "content": [], "surprise": 1}])
    with pytest.raises(ValidationError):
        messages_from_json(raw)


def test_messages_are_immutable() -> None:
    message = UserMessage(content="x")
    with pytest.raises(ValidationError):
        message.content = []  # type: ignore[misc]

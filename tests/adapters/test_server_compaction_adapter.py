"""The Anthropic adapter's side of server-side compaction: the request it builds
validates against the official SDK's beta request types (the compact edit, a replayed
compaction block), the turns before the latest block are left out, the compaction's
own usage is billed, the beta header joins one the model was given, and a model
without the capability refuses before building anything."""

from __future__ import annotations

from typing import Any

import pydantic_core
import pytest
from _sdk_types import assert_conforms
from anthropic.types.beta.message_create_params import (
    MessageCreateParamsNonStreaming,
    MessageCreateParamsStreaming,
)

from raygent import (
    AnthropicModel,
    AssistantMessage,
    ModelOptions,
    ProviderBlock,
    ServerCompaction,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from raygent.errors import CapabilityError
from raygent.models import _anthropic_wire as wire
from raygent.sim import serve

KEY = "sk-ant-test"
BLOCK = {"type": "compaction", "content": "Summary so far.", "encrypted_content": "opaque=="}
THINKING = {"type": "thinking", "thinking": "old reasoning", "signature": "sig=="}
OPTIONS = ModelOptions(
    server_compaction=ServerCompaction(
        trigger=60_000, instructions="Keep the numbers.", pause_after_compaction=True
    )
)


def _conversation() -> list[Any]:
    compacted = AssistantMessage(
        content=[
            ProviderBlock(provider="anthropic", kind="thinking", data=THINKING),
            ProviderBlock(provider="anthropic", kind="compaction", data=BLOCK),
        ],
        tool_calls=[ToolCall.parse("toolu_1", "lookup", '{"n": 1}')],
    )
    return [
        SystemMessage(content="You help."),
        UserMessage(content="a very long question " * 10),
        AssistantMessage(content="an early answer"),
        UserMessage(content="go on"),
        compacted,
        ToolMessage(call_id="toolu_1", content="result 1"),
    ]


@pytest.mark.parametrize(
    ("stream", "params"),
    [(False, MessageCreateParamsNonStreaming), (True, MessageCreateParamsStreaming)],
)
def test_the_request_validates_against_the_sdk_beta_types(stream: bool, params: type) -> None:
    body = AnthropicModel("claude-opus-4-6", api_key=KEY).request_body(
        _conversation(), OPTIONS, stream=stream
    )
    assert_conforms(body, params)
    assert body["context_management"] == {
        "edits": [
            {
                "type": "compact_20260112",
                "trigger": {"type": "input_tokens", "value": 60_000},
                "pause_after_compaction": True,
                "instructions": "Keep the numbers.",
            }
        ]
    }


def test_nothing_before_the_latest_block_is_sent() -> None:
    body = AnthropicModel("claude-opus-4-6", api_key=KEY).request_body(
        _conversation(), OPTIONS, stream=False
    )
    assert body["system"] == [{"type": "text", "text": "You help."}]
    first, second = body["messages"]
    # The block's turn starts at the block (the thinking before it is dropped too).
    assert first["role"] == "assistant"
    assert first["content"][0] == BLOCK
    assert [b["type"] for b in first["content"]] == ["compaction", "tool_use"]
    assert second["content"][0]["type"] == "tool_result"


def test_the_capability_follows_the_models_the_reference_lists() -> None:
    listed = ("claude-opus-4-6", "claude-sonnet-4-6", "claude-opus-4-7", "claude-haiku-5-5")
    for name in listed:
        assert AnthropicModel(name, api_key=KEY).capabilities.server_compaction, name
    for name in ("claude-sonnet-4-5", "claude-3-7-sonnet-latest", "claude-haiku-4-5"):
        assert not AnthropicModel(name, api_key=KEY).capabilities.server_compaction, name
    with pytest.raises(CapabilityError, match="claude-sonnet-4-5"):
        AnthropicModel("claude-sonnet-4-5", api_key=KEY).request_body(
            [UserMessage(content="hi")], OPTIONS, stream=False
        )


def test_the_compactions_own_tokens_are_billed() -> None:
    raw = {
        "input_tokens": 23_000,
        "output_tokens": 1_000,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "iterations": [
            {"type": "compaction", "input_tokens": 180_000, "output_tokens": 3_500},
            {"type": "message", "input_tokens": 23_000, "output_tokens": 1_000},
        ],
    }
    usage = wire.usage_from(raw)
    assert (usage.input_tokens, usage.output_tokens) == (203_000, 4_500)
    assert wire.iterations_of(raw) == raw["iterations"]
    assert wire.finish_reason("compaction") == "pause_turn"


async def test_the_beta_header_joins_one_the_model_was_given() -> None:
    async with serve() as sim:
        model = AnthropicModel(
            "claude-opus-4-6",
            api_key=KEY,
            base_url=sim.anthropic_base_url,
            headers={"anthropic-beta": "context-1m-2025-08-07"},
        )
        await model.complete([UserMessage(content="hi")], OPTIONS)
        await model.complete([UserMessage(content="hi")])
        asked, plain = sim.requests
    assert asked.headers["anthropic-beta"] == "context-1m-2025-08-07,compact-2026-01-12"
    assert plain.headers["anthropic-beta"] == "context-1m-2025-08-07"


async def test_a_provider_batch_of_compacting_lines_carries_the_beta_header() -> None:
    async with serve() as sim:
        model = AnthropicModel("claude-opus-4-6", api_key=KEY, base_url=sim.anthropic_base_url)
        api = model.batch_api()
        assert api is not None
        body = model.request_body([UserMessage(content="hi")], OPTIONS, stream=False)
        plain = model.request_body([UserMessage(content="hi")], None, stream=False)
        await api.submit([api.encode("a", pydantic_core.to_json(body))], "tag-a")
        await api.submit([api.encode("b", pydantic_core.to_json(plain))], "tag-b")
        asked, unasked = (r for r in sim.requests if r.path == "/v1/messages/batches")
    assert asked.headers["anthropic-beta"] == "compact-2026-01-12"
    assert "anthropic-beta" not in unasked.headers

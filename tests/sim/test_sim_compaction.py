"""Anthropic's server-side compaction in the simulator, read through the official SDK's
beta types: a request over its trigger gets a compaction block first (unstreamed and
streamed, with `usage.iterations`), a request that sends the block back is read from it,
a block changed on the way back or a compaction asked without its beta header is a 400.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from anthropic.types.beta import BetaMessage, BetaRawMessageStreamEvent
from pydantic import TypeAdapter
from sim_helpers import Clients, assert_no_extra

from raygent.sim import serve

BETA = "compact-2026-01-12"
TRIGGER = 50_000  # the API's minimum
LONG = "lorem ipsum dolor sit amet " * 8_000  # 216,000 characters: ~54,000 tokens
EVENTS: TypeAdapter[Any] = TypeAdapter(BetaRawMessageStreamEvent)


def _edit(**extra: Any) -> dict[str, Any]:
    trigger = {"type": "input_tokens", "value": TRIGGER}
    return {"edits": [{"type": "compact_20260112", "trigger": trigger, **extra}]}


def _messages(text: str = LONG) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text + " What is in the text?"}]


async def _create(client: anthropic.AsyncAnthropic, messages: Any, **extra: Any) -> BetaMessage:
    return await client.beta.messages.create(
        model="claude-opus-4-6",
        max_tokens=200,
        messages=messages,
        betas=[BETA],
        context_management=_edit(**extra),
    )


async def test_over_the_trigger_the_reply_starts_with_a_compaction_block(
    clients: Clients,
) -> None:
    async with serve() as sim:
        message = await _create(clients.anthropic(sim), _messages())
    assert_no_extra(message)
    first, second = message.content
    assert first.type == "compaction" and first.content and first.encrypted_content
    assert "What is in the text?" in first.content
    assert second.type == "text"
    usage = message.usage
    assert usage.iterations is not None
    compaction, sampled = usage.iterations
    assert compaction.type == "compaction" and compaction.input_tokens >= TRIGGER
    # The reply's turn read the summary, not the closed context; the top level says so.
    assert sampled.type == "message" and sampled.input_tokens < 1_000
    assert usage.input_tokens == sampled.input_tokens
    assert message.stop_reason == "end_turn"
    headers = sim.requests[-1].headers
    assert BETA in headers["anthropic-beta"]


async def test_below_the_trigger_nothing_is_compacted(clients: Clients) -> None:
    async with serve() as sim:
        message = await _create(clients.anthropic(sim), _messages("short"))
    assert [block.type for block in message.content] == ["text"]
    assert message.usage.iterations is None


async def test_a_streamed_compaction_arrives_as_the_sdk_accumulates_it(clients: Clients) -> None:
    async with serve() as sim:
        client = clients.anthropic(sim)
        async with client.beta.messages.stream(
            model="claude-opus-4-6",
            max_tokens=200,
            messages=_messages(),  # type: ignore[arg-type]
            betas=[BETA],
            context_management=_edit(),  # type: ignore[arg-type]
        ) as stream:
            final = await stream.get_final_message()
        raw = await clients.http(sim).post(
            "/v1/messages",
            json={
                "model": "claude-opus-4-6",
                "max_tokens": 200,
                "messages": _messages(),
                "stream": True,
                "context_management": _edit(),
            },
            headers={"anthropic-beta": BETA, "anthropic-version": "2023-06-01"},
        )
    unstreamed = final.content[0]
    assert unstreamed.type == "compaction" and unstreamed.content and unstreamed.encrypted_content
    assert final.content[1].type == "text"
    assert final.usage.iterations is not None and final.usage.iterations[0].type == "compaction"
    events = []
    for block in raw.text.strip().split("\n\n"):
        name, data = (line.split(": ", 1)[1] for line in block.split("\n"))
        if name != "ping":
            event = EVENTS.validate_json(data, strict=True)
            assert_no_extra(event)
            events.append(event)
    deltas = [e.delta for e in events if e.type == "content_block_delta" and e.index == 0]
    assert [d.type for d in deltas] == ["compaction_delta"]  # the summary comes whole


async def test_a_replayed_block_is_read_from_and_must_come_back_verbatim(
    clients: Clients,
) -> None:
    async with serve() as sim:
        client = clients.anthropic(sim)
        first = await _create(client, _messages())
        returned = [block.model_dump(exclude_none=True) for block in first.content]
        follow = {"role": "user", "content": "And in short?"}
        again = [*_messages(), {"role": "assistant", "content": returned}, follow]
        second = await _create(client, again)
        # Nothing before the block is read: far below the trigger, no new compaction.
        assert [b.type for b in second.content] == ["text"]
        assert second.usage.input_tokens < 1_000
        changed = [{**returned[0], "content": "a summary of my own"}, *returned[1:]]
        altered = [*_messages(), {"role": "assistant", "content": changed}, follow]
        with pytest.raises(anthropic.BadRequestError, match="not sent back"):
            await _create(client, altered)


async def test_pause_after_compaction_stops_after_the_block(clients: Clients) -> None:
    async with serve() as sim:
        message = await _create(clients.anthropic(sim), _messages(), pause_after_compaction=True)
    assert [b.type for b in message.content] == ["compaction"]
    assert message.stop_reason == "compaction"
    assert message.usage.iterations is not None
    assert [i.type for i in message.usage.iterations] == ["compaction"]


async def test_compaction_needs_its_beta_header_and_a_trigger_of_50k(clients: Clients) -> None:
    async with serve() as sim:
        client = clients.anthropic(sim)
        with pytest.raises(anthropic.BadRequestError, match=BETA):
            await client.beta.messages.create(
                model="claude-opus-4-6",
                max_tokens=200,
                messages=_messages("short"),  # type: ignore[arg-type]
                context_management=_edit(),  # type: ignore[arg-type]
            )
        low = {
            "edits": [
                {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 10}}
            ]
        }
        with pytest.raises(anthropic.BadRequestError, match="at least 50000"):
            await client.beta.messages.create(
                model="claude-opus-4-6",
                max_tokens=200,
                messages=_messages("short"),  # type: ignore[arg-type]
                betas=[BETA],
                context_management=low,  # type: ignore[arg-type]
            )

"""Server-side compaction in a run, against the simulator's Anthropic wire, on both
backends: the request asks for it (edit and beta header), the compaction block comes
back verbatim on the turn and goes back exactly as received (what precedes it left
out), the report says what the provider closed; a model without the capability fails
the run before anything is sent; with client compaction, the server goes first."""

from __future__ import annotations

from typing import Any

import pytest
from agent_support import KEY, add, drain

import raygent
from raygent import AnthropicModel, OpenAIModel, ProviderBlock, ServerCompaction
from raygent.compaction import CompactionContext, CompactionResult
from raygent.errors import CapabilityError
from raygent.sim import Match, Reply, Rule, Simulator, ToolCallReply, serve
from raygent.sim._compaction import seal
from raygent.stores import Scope, SQLiteStore

BETA = "compact-2026-01-12"
LONG = "lorem ipsum dolor sit amet " * 8_000  # ~54,000 tokens: over a 50,000 trigger
SERVER = ServerCompaction(trigger=50_000)
ADD_FIRST = [
    Rule(
        match=Match(after_tool_result=False),
        reply=Reply(tool_calls=[ToolCallReply("add", {"a": 2, "b": 3})]),
        times=1,
    )
]


def _model(sim: Simulator, name: str = "claude-opus-4-6") -> AnthropicModel:
    return AnthropicModel(name, base_url=sim.anthropic_base_url, api_key=KEY)


def _compaction_blocks(result: raygent.AgentResult) -> list[ProviderBlock]:
    return [
        part
        for message in result.report.messages or []
        for part in message.content
        if isinstance(part, ProviderBlock) and part.kind == "compaction"
    ]


@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])
async def test_the_block_is_kept_replayed_verbatim_and_reported(streaming: bool) -> None:
    async with serve(ADD_FIRST) as sim:
        bot = raygent.agent(
            model=_model(sim), tools=[add], server_compaction=SERVER, capture_messages=True
        )
        if streaming:
            _, result = await drain(bot.stream(LONG))
        else:
            result = await bot.execute(LONG)
        first, second = (r for r in sim.requests if r.path == "/v1/messages")
    assert result.ok, result.error
    # Asked for on every trip: the documented edit and its beta header.
    for sent in (first, second):
        assert BETA in sent.headers["anthropic-beta"].split(",")
        edit = sent.body["context_management"]["edits"][0]
        assert edit == {
            "type": "compact_20260112",
            "trigger": {"type": "input_tokens", "value": 50_000},
            "pause_after_compaction": False,
        }
    # Kept verbatim on the turn (streamed or not, the same block).
    (block,) = _compaction_blocks(result)
    summary = block.data["content"]
    assert block.data == {
        "type": "compaction",
        "content": summary,
        "encrypted_content": seal(summary),
    }
    # Replayed as received, with nothing before it: the long input is not sent again.
    replayed = second.body["messages"]
    assert replayed[0]["role"] == "assistant" and replayed[0]["content"][0] == block.data
    assert LONG not in str(replayed)
    # Reported, with what the provider closed; its tokens are billed in the trip.
    (record,) = result.report.compactions
    assert (record.kind, record.status, record.counting, record.trip_index) == (
        "server",
        "applied",
        "provider",
        0,
    )
    assert record.input_tokens is not None and record.input_tokens >= 50_000
    assert record.tokens_after is not None and record.tokens_after < 1_000
    assert record.usage is not None and record.usage.input_tokens == record.input_tokens
    trip = result.report.trips[0]
    assert trip.usage.input_tokens == record.input_tokens + record.tokens_after
    assert result.report.trips[1].usage.input_tokens < 1_000


async def test_a_model_without_the_capability_fails_before_sending() -> None:
    async with serve() as sim:
        openai_bot = raygent.agent(
            model=OpenAIModel("gpt-4o", base_url=sim.openai_base_url, api_key=KEY),
            server_compaction=True,
        )
        refused = await openai_bot.execute("hi")
        older = raygent.agent(model=_model(sim, "claude-sonnet-4-5"))
        per_call = await older.execute("hi", server_compaction=SERVER)
        plain = await older.execute("hi")  # the agent itself asks for none
        requests = [r for r in sim.requests if "messages" in r.path or "chat" in r.path]
    for result in (refused, per_call):
        assert not result.ok and isinstance(result.error, CapabilityError)
        assert result.error.code == "MODEL_CAPABILITY"
        assert result.report.trips == []
    assert "gpt-4o" in str(refused.error) and "claude-sonnet-4-5" in str(per_call.error)
    assert plain.ok
    assert len(requests) == 1  # only the plain run's


async def test_a_call_can_turn_it_off() -> None:
    async with serve() as sim:
        bot = raygent.agent(model=_model(sim), server_compaction=SERVER)
        result = await bot.execute(LONG, server_compaction=False)
        (sent,) = sim.requests
    assert result.ok and result.report.compactions == []
    assert "context_management" not in sent.body and "anthropic-beta" not in sent.headers


async def test_pause_after_compaction_goes_on_with_the_turn() -> None:
    async with serve() as sim:
        bot = raygent.agent(
            model=_model(sim),
            server_compaction=ServerCompaction(trigger=50_000, pause_after_compaction=True),
            capture_messages=True,
        )
        result = await bot.execute(LONG)
        first, second = sim.requests
    assert result.ok, result.error
    assert [t.finish_reason for t in result.report.trips] == ["pause_turn", "stop"]
    assert first.body["context_management"]["edits"][0]["pause_after_compaction"] is True
    # The paused turn (the block alone) goes back last, and the model goes on from it.
    (block,) = _compaction_blocks(result)
    assert second.body["messages"] == [{"role": "assistant", "content": [block.data]}]
    assert result.text.startswith("Simulated reply")
    assert [c.kind for c in result.report.compactions] == ["server"]


async def test_a_session_goes_on_from_the_compacted_history(tmp_path: Any) -> None:
    memory = raygent.Memory(store=SQLiteStore(tmp_path / "s.db"))
    async with serve() as sim:
        bot = raygent.agent(model=_model(sim), server_compaction=SERVER, memory=memory)
        first = await bot.execute(LONG, session_id="long")
        second = await bot.execute("And in short?", session_id="long")
        last = sim.requests[-1]
    assert first.ok and second.ok, (first.error, second.error)
    history = await memory.store.load(Scope(session_id="long"))
    stored = [p for m in history for p in m.content if isinstance(p, ProviderBlock)]
    assert [p.kind for p in stored] == ["compaction"]
    sent = last.body["messages"]
    assert sent[0]["content"][0] == stored[0].data  # from the block, verbatim
    assert sent[-1] == {"role": "user", "content": [{"type": "text", "text": "And in short?"}]}
    assert LONG not in str(sent)
    assert second.report.compactions == []  # the second request is far below the trigger


@raygent.tool
def read_part(n: int) -> str:
    """Read one part of the report.

    Args:
        n: which part.
    """
    return f"part {n}: " + "x" * 6_000  # ~1,500 tokens


READ_PARTS = [
    Rule(
        match=Match(after_tool_result=False),
        reply=Reply(tool_calls=[ToolCallReply("read_part", {"n": 1})]),
        times=1,
    ),
    Rule(
        match=Match(after_tool_result=True),
        reply=[
            *(Reply(tool_calls=[ToolCallReply("read_part", {"n": n})]) for n in (2, 3, 4)),
            Reply(text="done"),
        ],
    ),
]


async def test_with_client_compaction_the_server_goes_first() -> None:
    seen: list[list[raygent.Message]] = []

    def summarize(history: list[raygent.Message], ctx: CompactionContext) -> CompactionResult:
        seen.append(history)
        return CompactionResult(
            summary=raygent.AssistantMessage(content="Parts read so far: all x."),
            replaces_from_index=ctx.from_index,
            replaces_to_index=ctx.to_index,
        )

    async with serve(READ_PARTS) as sim:
        bot = raygent.agent(
            model=_model(sim),
            tools=[read_part],
            compaction=raygent.Compaction(after_tokens=2_000, keep=1, summarize=summarize),
            server_compaction=SERVER,
            capture_messages=True,
        )
        result = await bot.execute(LONG)
        last = sim.requests[-1].body["messages"]
    assert result.ok, result.error
    decisions = [(c.kind, c.trip_index, c.status, c.reason) for c in result.report.compactions]
    # Over the server's trigger the client leaves it to the provider, which compacts.
    assert decisions[:2] == [
        ("client", 0, "skipped", "server-first"),
        ("server", 0, "applied", None),
    ]
    # Later, below the server's trigger and above its own, the client summarises, but
    # only what follows the compaction block's turn (which is never summarised).
    applied = [c for c in result.report.compactions[2:] if c.status == "applied"]
    assert applied and all(c.kind == "client" for c in applied)
    assert all(c.replaces_from_index is not None and c.replaces_from_index > 1 for c in applied)
    assert seen and not any(
        isinstance(p, ProviderBlock) for history in seen for m in history for p in m.content
    )
    (block,) = _compaction_blocks(result)
    assert last[0]["content"][0] == block.data  # still sent from the block, verbatim
    assert any("Parts read so far" in str(m) for m in last)

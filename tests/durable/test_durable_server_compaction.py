"""A durable run whose provider compacted its context: the snapshot carries the
compaction block as it came, and a resume (by a new agent, from the store) sends it
back verbatim, with the provider's record in the report (both backends)."""

from __future__ import annotations

from pathlib import Path

import raygent
from raygent import Approve, Durable, ProviderBlock, ServerCompaction
from raygent.errors import DriftError
from raygent.sim import Match, Reply, Rule, ToolCallReply, serve
from raygent.sim._compaction import seal
from raygent.stores import SQLiteStore

LONG = "lorem ipsum dolor sit amet " * 8_000  # ~54,000 tokens: over a 50,000 trigger
SCRIPT = [
    Rule(
        match=Match(after_tool_result=False),
        reply=Reply(tool_calls=[ToolCallReply("send", {"to": "ann"})]),
    ),
    Rule(match=Match(after_tool_result=True), reply=Reply(text="Sent.")),
]


@raygent.tool(approval=True)
def send(to: str) -> str:
    """Send a message."""
    return f"sent to {to}"


def _agent(sim: object, store: SQLiteStore, trigger: int = 50_000) -> raygent.Agent:
    model = raygent.AnthropicModel(
        "claude-opus-4-6",
        base_url=sim.anthropic_base_url,  # type: ignore[attr-defined]
        api_key="sk-a",
    )
    return raygent.agent(
        model=model,
        tools=[send],
        durable=Durable(store=store),
        server_compaction=ServerCompaction(trigger=trigger),
        capture_messages=True,
    )


async def test_a_resumed_run_replays_the_compaction_block_verbatim(tmp_path: Path) -> None:
    async with serve(SCRIPT) as sim:
        store = SQLiteStore(tmp_path / "runs.db")
        paused = await _agent(sim, store).execute(LONG)
        assert paused.status == "awaiting_approval", paused.error
        (call,) = paused.pending
        await store.aclose()
        # A new process would build the agent anew and read the snapshot from the store.
        reopened = SQLiteStore(tmp_path / "runs.db")
        done = await _agent(sim, reopened).resume(
            paused.run_id, approvals={call.call_id: Approve()}
        )
        await reopened.aclose()
        _, second = sim.requests
    assert done.ok, done.error
    assert done.text == "Sent."
    block = first_block(done.report.messages or [])
    summary = block.data["content"]
    assert block.data == {
        "type": "compaction",
        "content": summary,
        "encrypted_content": seal(summary),
    }
    # The resumed trip sends the block exactly as the first reply had it, nothing before.
    assert second.body["messages"][0]["content"][0] == block.data
    assert LONG not in str(second.body["messages"])
    assert [(c.kind, c.trip_index) for c in done.report.compactions] == [("server", 0)]


def first_block(messages: list[raygent.Message]) -> ProviderBlock:
    return next(
        p
        for m in messages
        for p in m.content
        if isinstance(p, ProviderBlock) and p.kind == "compaction"
    )


async def test_a_resume_with_another_trigger_is_drift(tmp_path: Path) -> None:
    async with serve(SCRIPT) as sim:
        store = SQLiteStore(tmp_path / "runs.db")
        paused = await _agent(sim, store).execute(LONG)
        (call,) = paused.pending
        drifted = await _agent(sim, store, trigger=60_000).resume(
            paused.run_id, approvals={call.call_id: Approve()}
        )
        await store.aclose()
        sent = len(sim.requests)
    assert isinstance(drifted.error, DriftError)
    assert "server_compaction_trigger" in str(drifted.error)
    assert sent == 1  # nothing sent after the pause

"""Tools that need approval: the run stops before them with its state stored, and a
resume with decisions continues it (both backends, both wires)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

import raygent
from raygent import Approve, Deny, Durable, ToolCall, ToolContext
from raygent.errors import AwaitingApprovalError, InvalidOptionsError
from raygent.sim import Match, Reply, Rule, ToolCallReply, serve
from raygent.stores import InMemoryStore, Scope, SQLiteStore

PROVIDERS = ["openai", "anthropic"]


def ledger(tmp_path: Path) -> Path:
    return tmp_path / "sent"


def make_tools(sent: Path) -> list[Any]:
    """`send` needs approval and records each execution (in whichever process runs it);
    `lookup` needs none; `refund` needs it only above 100."""

    @raygent.tool(approval=True)
    def send(to: str) -> str:
        """Send a message."""
        with sent.open("a") as f:
            f.write(f"send {to}\n")
        return f"sent to {to}"

    @raygent.tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    def over_100(call: ToolCall, ctx: ToolContext) -> bool:
        return bool(call.arguments and call.arguments.get("amount", 0) > 100)

    @raygent.tool(approval=over_100)
    def refund(amount: int) -> str:
        """Refund an amount."""
        with sent.open("a") as f:
            f.write(f"refund {amount}\n")
        return f"refunded {amount}"

    return [send, lookup, refund]


def executions(sent: Path) -> list[str]:
    return sent.read_text().splitlines() if sent.exists() else []


ASK = Reply(
    text="I will send both and look one up.",
    tool_calls=[
        ToolCallReply("send", {"to": "ann"}),
        ToolCallReply("send", {"to": "bob"}),
        ToolCallReply("lookup", {"key": "k"}),
    ],
)
SCRIPT = [
    Rule(match=Match(after_tool_result=False), reply=ASK),
    Rule(match=Match(after_tool_result=True), reply=Reply(text="Done with the messages.")),
]


def model(provider: str, sim: Any) -> Any:
    if provider == "openai":
        return raygent.OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-a")
    return raygent.AnthropicModel("sim-claude", base_url=sim.anthropic_base_url, api_key="sk-a")


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_call_needing_approval_stops_the_run_until_decided(
    provider: str, tmp_path: Path
) -> None:
    sent, store = ledger(tmp_path), InMemoryStore()
    async with serve(SCRIPT) as sim:
        bot = raygent.agent(
            model=model(provider, sim), tools=make_tools(sent), durable=Durable(store=store)
        )
        paused = await bot.execute("Message ann and bob.")
        requests_at_pause = sim.stats().requests
        assert paused.status == "awaiting_approval"
        assert isinstance(paused.error, AwaitingApprovalError)
        pending = paused.pending
        assert [(p.tool, p.arguments) for p in pending] == [
            ("send", {"to": "ann"}),
            ("send", {"to": "bob"}),
        ]
        assert executions(sent) == []  # nothing ran, not even the lookup
        assert paused.report.tool_calls == []
        ann, bob = (p.call_id for p in pending)
        done = await bot.resume(
            paused.run_id, approvals={ann: Approve(), bob: Deny(reason="bob opted out")}
        )
        requests_after = sim.stats().requests
        again = await bot.resume(paused.run_id, approvals={ann: Approve(), bob: Deny()})
        bodies = [r.body for r in sim.requests]
    assert done.ok, done.error
    assert done.text == "Done with the messages."
    assert executions(sent) == ["send ann"]  # approved once, denied never ran
    outputs = {c.call_id: (c.output, c.error) for c in done.report.tool_calls}
    assert outputs[ann][0] == "sent to ann"
    assert outputs[bob][1] is not None and outputs[bob][1]["reason"] == "bob opted out"
    # The model read the denial as the call's error result.
    assert "bob opted out" in str(bodies[-1])
    assert requests_at_pause == 1 and requests_after == 2
    assert done.report.resumes[0].approvals == {ann: "approved", bob: "denied: bob opted out"}
    assert done.usage.requests == 2
    # A second resume returns the same result, running nothing.
    assert again.ok and again.text == done.text and again.report.resumes[-1].already_resolved
    assert executions(sent) == ["send ann"] and sim_requests_unchanged(bodies, requests_after)


def sim_requests_unchanged(bodies: list[Any], count: int) -> bool:
    return len(bodies) == count


async def test_a_partial_decision_keeps_the_rest_waiting(tmp_path: Path) -> None:
    sent, store = ledger(tmp_path), InMemoryStore()
    async with serve(SCRIPT) as sim:
        bot = raygent.agent(
            model=model("openai", sim), tools=make_tools(sent), durable=Durable(store=store)
        )
        paused = await bot.execute("Message ann and bob.")
        ann, bob = (p.call_id for p in paused.pending)
        half = await bot.resume(paused.run_id, approvals={ann: Approve()})
        assert half.status == "awaiting_approval"
        assert [p.call_id for p in half.pending] == [bob]
        assert executions(sent) == []
        done = await bot.resume(paused.run_id, approvals={bob: Approve()})
    assert done.ok, done.error
    assert sorted(executions(sent)) == ["send ann", "send bob"]
    assert [r.approvals for r in done.report.resumes] == [{ann: "approved"}, {bob: "approved"}]


async def test_an_approval_policy_decides_per_call(tmp_path: Path) -> None:
    sent = ledger(tmp_path)
    script = [
        Rule(
            match=Match(after_tool_result=False),
            reply=Reply(
                tool_calls=[
                    ToolCallReply("refund", {"amount": 20}),
                    ToolCallReply("refund", {"amount": 500}),
                ]
            ),
        ),
        Rule(match=Match(after_tool_result=True), reply=Reply(text="Refunds handled.")),
    ]
    async with serve(script) as sim:
        bot = raygent.agent(
            model=model("openai", sim), tools=make_tools(sent), durable=Durable(InMemoryStore())
        )
        paused = await bot.execute("Refund both.")
        assert [p.arguments for p in paused.pending] == [{"amount": 500}]
        done = await bot.resume(paused.run_id, approvals={paused.pending[0].call_id: Deny()})
    assert done.ok and executions(sent) == ["refund 20"]


async def test_an_approval_handler_answers_in_process(tmp_path: Path) -> None:
    sent, seen = ledger(tmp_path), []

    async def handler(pending: Any) -> dict[str, Any]:
        seen.extend(p.tool for p in pending)
        return {p.call_id: Approve() if p.arguments["to"] == "ann" else Deny() for p in pending}

    async with serve(SCRIPT) as sim:
        bot = raygent.agent(model=model("openai", sim), tools=make_tools(sent))
        result = await bot.execute("Message ann and bob.", approval_handler=handler)
    assert result.ok, result.error
    assert seen == ["send", "send"] and executions(sent) == ["send ann"]


async def test_without_durable_a_paused_run_resumes_in_this_process(tmp_path: Path) -> None:
    sent = ledger(tmp_path)
    async with serve(SCRIPT) as sim:
        bot = raygent.agent(model=model("openai", sim), tools=make_tools(sent))
        paused = await bot.execute("Message ann and bob.")
        decisions = {p.call_id: Approve() for p in paused.pending}
        done = await bot.resume(paused.run_id, approvals=decisions)
    assert paused.status == "awaiting_approval" and done.ok, done.error
    assert sorted(executions(sent)) == ["send ann", "send bob"]


async def test_a_paused_run_on_a_session_saves_its_turn_once_decided(tmp_path: Path) -> None:
    sent, store = ledger(tmp_path), SQLiteStore(tmp_path / "s.db")
    session = f"s-{uuid.uuid4().hex[:8]}"
    async with serve(SCRIPT) as sim:
        bot = raygent.agent(
            model=model("openai", sim),
            tools=make_tools(sent),
            durable=Durable(store=store),
            memory=raygent.Memory(store=store, save_policy="message"),
        )
        paused = await bot.execute("Message ann and bob.", session_id=session)
        stored_at_pause = [m.role for m in await store.load(Scope(session))]
        decisions = {p.call_id: Approve() for p in paused.pending}
        done = await bot.resume(paused.run_id, approvals=decisions)
        history = await store.load(Scope(session))
    await store.aclose()
    assert stored_at_pause == ["user"]  # the tool-call turn waits for its results
    assert done.ok, done.error
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "tool", "assistant"]


async def test_a_streamed_resume_yields_the_rest_of_the_run(tmp_path: Path) -> None:
    sent = ledger(tmp_path)
    async with serve(SCRIPT) as sim:
        bot = raygent.agent(
            model=model("openai", sim), tools=make_tools(sent), durable=Durable(InMemoryStore())
        )
        paused = await bot.execute("Message ann and bob.")
        decisions = {p.call_id: Approve() for p in paused.pending}
        stream = bot.stream_resume(paused.run_id, approvals=decisions)
        events = [event async for event in stream]
        result = await stream.result
        # stream(resume=...) is the same thing: here the run has ended, so it is the
        # completed result again, with no trip.
        again = bot.stream("ignored", resume=paused.run_id)
        replayed = [event async for event in again]
        repeated = await again.result
    assert result.ok, result.error
    types = [e.type for e in events]
    assert types[0] == "agent.starting" and types[-1] == "agent.completed"
    assert types.count("agent.tool.called") == 3 and "agent.trip.started" in types
    assert {e.run_id for e in events} == {paused.run_id}
    assert repeated.text == result.text and repeated.report.resumes[-1].already_resolved
    assert replayed == []


async def test_a_bad_decision_is_a_typed_failure_that_changes_nothing(tmp_path: Path) -> None:
    sent, store = ledger(tmp_path), InMemoryStore()
    async with serve(SCRIPT) as sim:
        bot = raygent.agent(
            model=model("openai", sim), tools=make_tools(sent), durable=Durable(store=store)
        )
        paused = await bot.execute("Message ann and bob.")
        before = await store.load_run(Scope(paused.run_id))
        bad = await bot.resume(paused.run_id, approvals={paused.pending[0].call_id: "yes"})  # type: ignore[dict-item]
        after = await store.load_run(Scope(paused.run_id))
    assert bad.status == "failed" and isinstance(bad.error, InvalidOptionsError)
    assert before == after and executions(sent) == []


async def test_a_paused_run_shows_its_pending_calls_and_resume_sync_continues_it(
    tmp_path: Path,
) -> None:
    sent = ledger(tmp_path)
    async with serve(SCRIPT) as sim:
        bot = raygent.agent(
            model=model("openai", sim), tools=make_tools(sent), durable=Durable(InMemoryStore())
        )
        paused = await bot.execute("Message ann and bob.")
        view = paused._repr_html_()
        decisions = {p.call_id: Approve() for p in paused.pending}
        # From sync code inside this running loop: a helper thread runs it.
        done = bot.resume_sync(paused.run_id, approvals=decisions)
        done_view = done._repr_html_()
    assert "awaiting approval" in view and "awaiting_approval" in view
    assert all(p.call_id in view and "send" in view for p in paused.pending)
    assert done.ok, done.error
    assert "awaiting approval" not in done_view and "resumed: from trip 1" in done_view


async def test_a_resumed_report_keeps_the_outputs_written_once_in_the_messages(
    tmp_path: Path,
) -> None:
    # A tool's output is stored once, as its tool message; the resumed report gets it back.
    sent, store = ledger(tmp_path), SQLiteStore(tmp_path / "runs.db")
    script = [
        Rule(
            reply=[
                Reply(tool_calls=[ToolCallReply("lookup", {"key": "k"})]),
                Reply(tool_calls=[ToolCallReply("send", {"to": "ann"})]),
                Reply(text="Sent."),
            ]
        )
    ]
    try:
        async with serve(script) as sim:
            bot = raygent.agent(
                model=model("openai", sim),
                tools=make_tools(sent),
                durable=Durable(store=store, delete_on_complete=False),
            )
            paused = await bot.execute("Look k up, then message ann.")
            assert paused.status == "awaiting_approval"
            record = await store.load_run(Scope(paused.run_id))
            assert record is not None
            # The lookup's round (its reply may have an entry of its own, written while
            # the round ran: on Ray that can take longer than the write's delay).
            (entry,) = [e for e in map(json.loads, record.entries) if e.get("tool_calls")]
            lookup_id = entry["tool_calls"][0]["call_id"]
            assert entry["outputs_in_messages"] == [lookup_id]
            assert entry["tool_calls"][0]["output"] is None
            assert entry["added"][-1]["content"][0]["text"] == "value of k"
            done = await bot.resume(paused.run_id, approvals={paused.pending[0].call_id: Approve()})
    finally:
        await store.aclose()
    assert done.ok, done.error
    outputs = [(c.name, c.output) for c in done.report.tool_calls]
    assert outputs == [("lookup", "value of k"), ("send", "sent to ann")]

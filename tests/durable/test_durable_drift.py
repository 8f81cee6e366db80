"""Drift: a durable run resumed by an agent that changed is refused, typed, and left as
it was; `force=True` goes on anyway. And abandoning a run."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from test_durable_approval import SCRIPT, executions, make_tools, model

import raygent
from raygent import Approve, Durable
from raygent.errors import AgentCancelledError, DriftError
from raygent.sim import Match, Reply, Rule, ToolCallReply, serve
from raygent.stores import InMemoryStore, Scope


@raygent.tool
def extra(x: int) -> int:
    """An extra tool."""
    return x


def changed_agents(sim: Any, tools: list[Any], store: Any) -> dict[str, raygent.Agent]:
    durable = Durable(store=store)
    other = raygent.OpenAIModel("sim-gpt-2", base_url=sim.openai_base_url, api_key="sk-a")
    return {
        "tools": raygent.agent(model=model("openai", sim), tools=[*tools, extra], durable=durable),
        "model": raygent.agent(model=other, tools=tools, durable=durable),
        "max_trips": raygent.agent(
            model=model("openai", sim), tools=tools, durable=durable, max_trips=3
        ),
        "version": raygent.agent(
            model=model("openai", sim), tools=tools, durable=durable, version="v2"
        ),
        "output": raygent.agent(
            model=model("openai", sim), tools=tools, durable=durable, output=dict
        ),
    }


async def test_a_changed_agent_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    sent, store = tmp_path / "sent", InMemoryStore()
    tools = make_tools(sent)
    async with serve(SCRIPT) as sim:
        original = raygent.agent(model=model("openai", sim), tools=tools, durable=Durable(store))
        paused = await original.execute("Message ann and bob.")
        decisions = {p.call_id: Approve() for p in paused.pending}
        before = await store.load_run(Scope(paused.run_id))
        refused = {
            field: await agent.resume(paused.run_id, approvals=decisions)
            for field, agent in changed_agents(sim, tools, store).items()
        }
        after = await store.load_run(Scope(paused.run_id))
        requests, ran = sim.stats().requests, executions(sent)
        done = await original.resume(paused.run_id, approvals=decisions)
    for field, result in refused.items():
        assert result.status == "failed", field
        assert isinstance(result.error, DriftError), field
        assert result.error.details["changed"] == [field]
        assert field in result.error.message
    assert before == after  # no claim, no entry: the run is as it was
    assert requests == 1 and ran == []
    # The right agent continues it.
    assert done.ok, done.error
    assert done.report.resumes[-1].drift == [] and not done.report.resumes[-1].forced


async def test_force_resumes_a_drifted_run_and_says_so(tmp_path: Path) -> None:
    sent, store = tmp_path / "sent", InMemoryStore()
    tools = make_tools(sent)
    async with serve(SCRIPT) as sim:
        original = raygent.agent(model=model("openai", sim), tools=tools, durable=Durable(store))
        paused = await original.execute("Message ann and bob.")
        decisions = {p.call_id: Approve() for p in paused.pending}
        bumped = changed_agents(sim, tools, store)["version"]
        done = await bumped.resume(paused.run_id, approvals=decisions, force=True)
    assert done.ok, done.error
    assert done.report.resumes[-1].forced and done.report.resumes[-1].drift == ["version"]
    assert sorted(executions(sent)) == ["send ann", "send bob"]


async def test_an_abandoned_run_ends_cancelled_and_records_its_error(tmp_path: Path) -> None:
    sent, store = tmp_path / "sent", InMemoryStore()
    session = f"s-{uuid.uuid4().hex[:8]}"
    async with serve(SCRIPT) as sim:
        bot = raygent.agent(
            model=model("openai", sim),
            tools=make_tools(sent),
            durable=Durable(store),
            memory=raygent.Memory(store=store),
        )
        paused = await bot.execute("Message ann and bob.", session_id=session)
        abandoned = await bot.abandon(paused.run_id, reason="nobody answered")
        later = await bot.resume(paused.run_id, approvals={paused.pending[0].call_id: Approve()})
        errors = await store.errors(Scope(session))
    assert abandoned.status == "cancelled"
    assert isinstance(abandoned.error, AgentCancelledError)
    assert abandoned.error.details["reason"] == "nobody answered"
    assert later.status == "cancelled" and later.report.resumes[-1].already_resolved
    assert [e.run_id for e in errors] == [paused.run_id]
    assert executions(sent) == []


@pytest.mark.parametrize("delete_on_complete", [True, False])
async def test_a_completed_run_keeps_its_outcome(delete_on_complete: bool, tmp_path: Path) -> None:
    store = InMemoryStore()
    script = [
        Rule(
            match=Match(after_tool_result=False),
            reply=Reply(tool_calls=[ToolCallReply("lookup", {"key": "k"})]),
        ),
        Rule(match=Match(after_tool_result=True), reply=Reply(text="It is k.")),
    ]
    async with serve(script) as sim:
        bot = raygent.agent(
            model=model("openai", sim),
            tools=make_tools(tmp_path / "sent"),
            durable=Durable(store, delete_on_complete),
        )
        result = await bot.execute("Look k up.")
        record = await store.load_run(Scope(result.run_id))
        again = await bot.resume(result.run_id)
    assert result.ok and record is not None and record.outcome is not None
    # One entry (a quick round is written with its reply), dropped once completed.
    assert len(record.entries) == (0 if delete_on_complete else 1)
    assert again.text == result.text and again.usage == result.usage

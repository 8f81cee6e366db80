"""The new wires inside the other features (issues 46.6 and 47.5), on both backends:
Gemini (a Gemini 3 model, whose thought signatures the simulator refuses missing or
altered) and Bedrock (a Claude model, whose reasoning signature it checks) in a durable
run paused for approval and resumed by a fresh agent from the journal, a workflow step
beside an OpenAI one, an MCP server's tools, and client-side compaction."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import raygent
import raygent.mcp
from raygent import Approve, BedrockModel, Durable, GeminiModel, OpenAIModel
from raygent.compaction import summarize
from raygent.models import ReasoningOptions
from raygent.sim import Match, Reply, Rule, Simulator, ToolCallReply, serve
from raygent.sim._bedrock_auth import TEST_CREDENTIALS
from raygent.sim._gemini_signatures import sign
from raygent.sim._plan import thinking_signature
from raygent.sim._stats import RecordedRequest
from raygent.stores import SQLiteStore

WIRES = ["gemini", "bedrock"]
KEY = "sk-wires"
# The main models sign their reasoning; the cheap ones summarise.
MAIN = {
    "gemini": "gemini-3-flash-preview",
    "bedrock": "us.anthropic.claude-haiku-4-5-20251001-v1:0",
}
CHEAP = {"gemini": "gemini-2.5-flash", "bedrock": "anthropic.claude-3-haiku-20240307-v1:0"}
THINK = {"reasoning": ReasoningOptions(effort="low")}
MCP_SERVER = str(Path(__file__).resolve().parent.parent / "mcp" / "server.py")


def wire_model(wire: str, sim: Simulator, name: str | None = None) -> Any:
    if wire == "gemini":
        return GeminiModel(name or MAIN[wire], base_url=sim.gemini_base_url, api_key=KEY)
    return BedrockModel(
        name or MAIN[wire],
        region="us-east-1",
        base_url=sim.url,
        access_key=TEST_CREDENTIALS.access_key,
        secret_key=TEST_CREDENTIALS.secret_key,
    )


def sent_to(sim: Simulator, wire: str, name: str | None = None) -> list[RecordedRequest]:
    """The model requests the simulator received on `wire` (for model `name`, if given)."""
    marker = "/models/" if wire == "gemini" else "/model/"
    found = [r for r in sim.requests if marker in r.path and isinstance(r.body, dict)]
    return [r for r in found if name is None or f"/{name}" in r.path]


def history(wire: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The parts (Gemini) or content blocks (Bedrock) of a request's turns, in order."""
    turns = body["contents"] if wire == "gemini" else body["messages"]
    return [p for t in turns for p in t.get("parts" if wire == "gemini" else "content", [])]


def signatures(wire: str, body: dict[str, Any]) -> list[str]:
    """The provider-issued signatures a request sends back: Gemini's thoughtSignature on
    a function call, Bedrock Claude's on a reasoning block."""
    if wire == "gemini":
        return [p["thoughtSignature"] for p in history(wire, body) if "functionCall" in p]
    return [
        b["reasoningContent"]["reasoningText"]["signature"]
        for b in history(wire, body)
        if "reasoningContent" in b
    ]


def issued(wire: str, thinking: str, name: str, args: dict[str, Any]) -> str:
    """The signature the simulator issues on a reply's call (Gemini) or thinking (Bedrock)."""
    if wire == "gemini":
        return sign({"functionCall": {"name": name, "args": args}})
    return thinking_signature(thinking)


def tool_results(wire: str, body: dict[str, Any]) -> list[str]:
    """What each tool result in a request says, as text."""
    if wire == "gemini":
        return [
            json.dumps(p["functionResponse"]["response"])
            for p in history(wire, body)
            if "functionResponse" in p
        ]
    return [
        json.dumps(b["toolResult"]["content"]) for b in history(wire, body) if "toolResult" in b
    ]


# ------------------------------------------------------------------------ durable runs


@raygent.tool(approval=True)
def transfer(amount: int) -> str:
    """Transfer an amount."""
    return f"transferred {amount}"


DURABLE_SCRIPT = [
    Rule(
        match=Match(after_tool_result=False),
        reply=Reply(
            thinking="A transfer needs approval.",
            tool_calls=[ToolCallReply("transfer", {"amount": 40})],
        ),
    ),
    Rule(match=Match(after_tool_result=True), reply=Reply(text="Transferred.")),
]


def durable_agent(wire: str, sim: Simulator, store: SQLiteStore) -> raygent.Agent:
    return raygent.agent(
        model=wire_model(wire, sim),
        tools=[transfer],
        model_options=THINK,
        durable=Durable(store=store),
    )


@pytest.mark.parametrize("wire", WIRES)
async def test_a_durable_run_resumed_sends_the_signature_back_from_the_journal(
    wire: str, backend_kind: str, tmp_path: Path
) -> None:
    """Paused for approval after a signed tool-calling trip, resumed by a fresh agent
    (its own model and store objects) from the journal alone: the second trip sends the
    first trip's signed part back verbatim, or the simulator would refuse it."""
    journal = tmp_path / "journal.db"
    async with serve(DURABLE_SCRIPT) as sim:
        stores = [SQLiteStore(journal), SQLiteStore(journal)]
        try:
            paused = await durable_agent(wire, sim, stores[0]).execute("Transfer 40.")
            assert paused.status == "awaiting_approval", paused.error
            [pending] = paused.pending
            second = durable_agent(wire, sim, stores[1])
            done = await second.resume(paused.run_id, approvals={pending.call_id: Approve()})
        finally:
            for store in stores:
                await store.aclose()
        sent = sent_to(sim, wire)
    assert done.ok, done.error
    assert done.text == "Transferred."
    assert [c.output for c in done.report.tool_calls] == ["transferred 40"]
    assert len(sent) == 2  # the first trip was not sent again
    assert signatures(wire, sent[0].body) == []
    # The one the simulator issued on the first trip, byte for byte (it checked it too).
    assert signatures(wire, sent[1].body) == [
        issued(wire, "A transfer needs approval.", "transfer", {"amount": 40})
    ]
    assert any("transferred 40" in r for r in tool_results(wire, sent[1].body))


# ------------------------------------------------------------------------ workflows


class Topic(BaseModel):
    topic: str
    words: int


class Count(BaseModel):
    n: int


@pytest.mark.parametrize("wire", WIRES)
async def test_a_workflow_with_a_step_on_the_wire_and_one_on_openai(
    wire: str, backend_kind: str
) -> None:
    script = [
        Rule(match=Match(system="^planner"), reply=Reply(json={"topic": "ray", "words": 3})),
        Rule(match=Match(system="^counter"), reply=Reply(json={"n": 7})),
    ]
    async with serve(script) as sim:
        planner = raygent.agent(
            name="planner",
            model=wire_model(wire, sim),
            system_prompt="planner: plan a text.",
            output=Topic,
        )
        counter = raygent.agent(
            name="counter",
            model=OpenAIModel("gpt-4o-mini", base_url=sim.openai_base_url, api_key=KEY),
            system_prompt="counter: count.",
            output=Count,
        )
        flow = raygent.workflow(
            name="mixed",
            output=Count,
            steps=[
                raygent.step("plan", agent=planner, output=Topic),
                raygent.step("count", agent=counter, output=Count),
            ],
        )
        result = await flow.execute("Plan a text.")
        on_wire, on_openai = (
            sent_to(sim, wire),
            [r for r in sim.requests if r.path.endswith("/chat/completions")],
        )
    assert result.ok, result.error
    assert result.outputs == {"plan": Topic(topic="ray", words=3), "count": Count(n=7)}
    assert result.data == Count(n=7)
    assert len(on_wire) == 1 and len(on_openai) == 1
    # The wire step asked for its schema on its own wire; the OpenAI step was given its
    # typed output as JSON.
    assert "Topic" in json.dumps(on_wire[0].body)
    given = on_openai[0].body["messages"][-1]["content"]
    assert Topic.model_validate_json(given) == Topic(topic="ray", words=3)


# ------------------------------------------------------------------------ MCP tools


@pytest.mark.parametrize("wire", WIRES)
async def test_an_agent_on_the_wire_calls_an_mcp_tool(wire: str, backend_kind: str) -> None:
    toolset = raygent.mcp.stdio(sys.executable, [MCP_SERVER], prefix="calc_", include=["add"])
    script = [
        Rule(
            match=Match(after_tool_result=False),
            reply=Reply(
                thinking="Add them.", tool_calls=[ToolCallReply("calc_add", {"a": 2, "b": 3})]
            ),
        ),
        Rule(match=Match(after_tool_result=True), reply=Reply(text="It is 5.")),
    ]
    try:
        async with serve(script) as sim:
            bot = raygent.agent(model=wire_model(wire, sim), tools=[toolset], model_options=THINK)
            result = await bot.execute("What is 2 + 3?")
            sent = sent_to(sim, wire)
    finally:
        await toolset.aclose()
    assert result.ok, result.error
    assert result.text == "It is 5."
    assert [(c.name, c.output) for c in result.report.tool_calls] == [("calc_add", "5")]
    assert len(sent) == 2
    # The tool was declared on the wire, and its result reached the model.
    assert "calc_add" in json.dumps(sent[0].body.get("tools") or sent[0].body.get("toolConfig"))
    assert any("5" in r for r in tool_results(wire, sent[1].body))
    assert len(signatures(wire, sent[1].body)) == 1


# ------------------------------------------------------------------------ compaction


@raygent.tool
def lookup(n: int) -> str:
    """Look something up.

    Args:
        n: which thing.
    """
    return f"result {n}: " + "x" * 400


SUMMARY = "The user asked for lookups; results were found."


@pytest.mark.parametrize("wire", WIRES)
async def test_a_long_run_compacted_with_the_summary_asked_on_the_wire(
    wire: str, backend_kind: str
) -> None:
    script = [
        Rule(
            match=Match(system="compact the history"),
            reply=Reply(text=f"<summary>{SUMMARY}</summary>"),
        ),
        Rule(
            match=Match(has_tools=True),
            reply=Reply(thinking="Look again.", tool_calls=[ToolCallReply("lookup", {"n": 1})]),
            times=4,
        ),
        Rule(match=Match(has_tools=True), reply=Reply(text="All looked up.")),
    ]
    async with serve(script) as sim:
        compaction = raygent.Compaction(
            after_tokens=400,
            keep=2,
            summarize=summarize(model=wire_model(wire, sim, CHEAP[wire]), max_tokens=200),
        )
        agent = raygent.agent(
            model=wire_model(wire, sim),
            tools=[lookup],
            compaction=compaction,
            model_options=THINK,
            capture_messages=True,
        )
        result = await agent.execute("look it up")
        summaries = sent_to(sim, wire, CHEAP[wire])
        main = sent_to(sim, wire, MAIN[wire])
    assert result.ok, result.error
    assert result.text == "All looked up."
    applied = [d for d in result.report.compactions if d.status == "applied"]
    assert applied and len(summaries) == len(applied)
    assert all("compact the history" in json.dumps(r.body) for r in summaries)
    assert len(main) == 5
    # The summary went in on the wire; the turns kept after it still carry their
    # signatures (the simulator refuses a missing or altered one).
    assert SUMMARY in json.dumps(main[-1].body)
    assert signatures(wire, main[-1].body)
    assert result.report.messages is not None
    assert any(m.compaction == "summary" for m in result.report.messages)

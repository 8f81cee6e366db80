"""An agent calling an MCP server's tools against the simulator, on both backends."""

from __future__ import annotations

import asyncio
import pickle
import sys
from pathlib import Path
from typing import Any

import raygent
import raygent.mcp
from raygent import AnthropicModel, OpenAIModel
from raygent.sim import Match, Reply, Rule, Simulator, ToolCallReply, serve
from raygent.tools import ToolContext

SERVER = str(Path(__file__).with_name("server.py"))


def make_model(provider: str, sim: Simulator) -> OpenAIModel | AnthropicModel:
    if provider == "openai":
        return OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-test")
    return AnthropicModel("sim-claude", base_url=sim.anthropic_base_url, api_key="sk-test")


def rules(*calls: ToolCallReply) -> list[Rule]:
    return [
        Rule(match=Match(after_tool_result=False), reply=Reply(tool_calls=list(calls))),
        Rule(match=Match(after_tool_result=True), reply=Reply(text="done")),
    ]


async def test_an_agent_calls_mcp_tools_beside_plain_ones(backend_kind: str) -> None:
    @raygent.tool
    def double(x: int) -> int:
        """Twice x."""
        return 2 * x

    toolset = raygent.mcp.stdio(sys.executable, [SERVER], prefix="calc_", include=["add", "fail"])
    calls = (
        ToolCallReply("calc_add", {"a": 2, "b": 3}),
        ToolCallReply("calc_add", {"a": "x"}),
        ToolCallReply("calc_fail", {}),
        ToolCallReply("double", {"x": 4}),
    )
    try:
        async with serve(rules(*calls)) as sim:
            bot = raygent.agent(model=make_model("openai", sim), tools=[double, toolset])
            result = await bot.execute("go", tool_schemas="compact")
            sent = sim.requests[0].body
        assert result.ok, result.error
        outputs = [
            (c.name, c.output, (c.error or {}).get("code")) for c in result.report.tool_calls
        ]
        assert outputs == [
            ("calc_add", "5", None),
            ("calc_add", None, "TOOL_INVALID_ARGUMENTS"),
            ("calc_fail", None, "TOOL_EXECUTION"),
            ("double", "8", None),
        ]
        assert sent is not None
        names = [t["function"]["name"] for t in sent["tools"]]
        assert names == ["double", "calc_add", "calc_fail"]
        add_schema = sent["tools"][1]["function"]["parameters"]
        assert add_schema["required"] == ["a", "b"] and "title" not in add_schema
    finally:
        await toolset.aclose()


async def test_64_concurrent_runs_share_one_server_process(backend_kind: str) -> None:
    toolset = raygent.mcp.stdio(sys.executable, [SERVER], include=["pid"])
    try:
        async with serve(rules(ToolCallReply("pid", {}))) as sim:
            bot = raygent.agent(model=make_model("anthropic", sim), tools=[toolset])
            results = await asyncio.gather(*(bot.execute(f"run {i}") for i in range(64)))
        assert all(r.ok for r in results), [r.error for r in results if not r.ok][:1]
        pids = {r.report.tool_calls[0].output for r in results}
        assert len(pids) == 1 and pids != {None}
    finally:
        await toolset.aclose()


async def test_a_dead_server_fails_the_call_and_the_next_run_restarts_it(
    backend_kind: str,
) -> None:
    toolset = raygent.mcp.stdio(sys.executable, [SERVER], include=["crash", "pid"])
    try:
        async with serve(rules(ToolCallReply("crash", {}))) as sim:
            bot = raygent.agent(model=make_model("openai", sim), tools=[toolset])
            crashed = await bot.execute("crash")
        async with serve(rules(ToolCallReply("pid", {}))) as sim:
            bot = raygent.agent(model=make_model("openai", sim), tools=[toolset])
            after = await bot.execute("pid")
        assert crashed.ok and after.ok
        assert (crashed.report.tool_calls[0].error or {}).get("code") == "MCP_SERVER"
        assert after.report.tool_calls[0].output is not None
        assert after.report.tool_calls[0].output.isdigit()
    finally:
        await toolset.aclose()


async def test_a_server_that_cannot_start_fails_the_run_typed(backend_kind: str) -> None:
    toolset = raygent.mcp.stdio(sys.executable, ["-c", "raise SystemExit(2)"], timeout=10)
    async with serve(rules()) as sim:
        bot = raygent.agent(model=make_model("openai", sim), tools=[toolset])
        result = await bot.execute("go")
        requests = len(sim.requests)
    assert result.error is not None and result.error.code == "MCP_SERVER"
    assert "it exited with code 2" in result.error.message
    assert result.error.retryable is False  # a broken server: a batch does not retry it
    assert requests == 0


async def test_a_toolset_pickles_by_configuration(backend_kind: str) -> None:
    toolset = raygent.mcp.stdio(sys.executable, [SERVER], include=["add"], timeout=5)
    try:
        await toolset.tools()  # connected here: the copy still carries no connection
        copy = pickle.loads(pickle.dumps(toolset))
        assert (copy.include, copy.timeout, copy.server) == (
            toolset.include,
            toolset.timeout,
            toolset.server,
        )
        [add] = await copy.tools()
        assert add.name == "add"
        await copy.aclose()
    finally:
        await toolset.aclose()


async def test_an_abort_ends_a_hanging_mcp_call(backend_kind: str) -> None:
    toolset = raygent.mcp.stdio(sys.executable, [SERVER], include=["hang", "add"], timeout=60)
    controller = raygent.AbortController()
    try:
        async with serve(rules(ToolCallReply("hang", {}))) as sim:
            bot = raygent.agent(model=make_model("openai", sim), tools=[toolset])
            # Aborted while the call is (in practice) at the server: the 60 s timeout
            # is not what ends it, either way.
            loop = asyncio.get_running_loop()
            bot.on("agent.tool.calling", lambda _: loop.call_later(0.3, controller.abort))
            started = asyncio.get_running_loop().time()
            result = await bot.execute("hang", signal=controller.signal)
            took = asyncio.get_running_loop().time() - started
        assert result.report.status == "cancelled", result.error
        assert took < 30
        [add] = [t for t in await toolset.tools() if t.name == "add"]
        assert (await add.invoke({"a": 1, "b": 2}, _context("add"))).text == "3"  # serving
    finally:
        await toolset.aclose()


async def test_approval_stops_an_mcp_call_until_decided(backend_kind: str) -> None:
    toolset = raygent.mcp.stdio(sys.executable, [SERVER], include=["add"], approval=True)
    seen: list[str] = []

    async def handler(pending: list[Any]) -> dict[str, Any]:
        seen.extend(p.tool for p in pending)
        return {p.call_id: raygent.Deny() for p in pending}

    try:
        async with serve(rules(ToolCallReply("add", {"a": 1, "b": 2}))) as sim:
            bot = raygent.agent(model=make_model("openai", sim), tools=[toolset])
            result = await bot.execute("add", approval_handler=handler)
        assert result.ok, result.error
        assert seen == ["add"]
        assert (result.report.tool_calls[0].error or {}).get("code") == "TOOL_DENIED"
    finally:
        await toolset.aclose()


def _context(name: str) -> ToolContext:
    return ToolContext(
        run_id="r", root_run_id="r", session_id=None, call_id="c", tool_name=name, trip_index=0
    )

"""A durable run with an MCP toolset: the signature names the server's tools, and a resume
lists them before checking drift, so a server whose tool list changed between the crash
and the resume is a DriftError naming the tools (force=True goes on)."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

from durable_support import FINAL, HANG, entries_written, script

import raygent
import raygent.mcp
from raygent import Durable
from raygent.errors import DriftError
from raygent.sim import Reply, ToolCallReply, serve
from raygent.stores import InMemoryStore, Scope

SERVER = str(Path(__file__).resolve().parent.parent / "mcp" / "server.py")
ADD = Reply(text="Adding.", tool_calls=[ToolCallReply("add", {"a": 1, "b": 2})])


def agent(sim: Any, store: InMemoryStore, toolset: raygent.mcp.MCPToolset) -> raygent.Agent:
    model = raygent.OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-d")
    return raygent.agent(model=model, tools=[toolset], durable=Durable(store=store))


async def second_trip(sim: Any, task: asyncio.Future[Any], timeout: float = 60.0) -> None:
    """Bounded wait until the run's second model request reached the simulator."""
    await sim.wait_until(lambda stats: stats.requests >= 2 or task.done(), timeout)
    assert not task.done(), task.result()


async def crashed_run(sim: Any, store: InMemoryStore) -> str:
    """A durable run stopped dead on its second trip (the model hangs; the task is
    cancelled: nothing ends the run in the store), after its MCP call settled."""
    toolset = raygent.mcp.stdio(sys.executable, [SERVER], include=["add", "extra"])
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    try:
        task = asyncio.ensure_future(agent(sim, store, toolset).execute("1 + 2?", run_id=run_id))
        await second_trip(sim, task)  # the tool round has settled: the model hangs now
        await entries_written(store, run_id, 1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    finally:
        await toolset.aclose()
    record = await store.load_run(Scope(run_id))
    assert record is not None and record.outcome is None  # left as a crash leaves it
    assert json.loads(record.header)["signature"]["tools"] == ["add"]
    return run_id


async def test_a_changed_tool_list_is_drift_and_the_same_one_resumes() -> None:
    store = InMemoryStore()
    async with serve(script(ADD, HANG, FINAL)) as sim:
        run_id = await crashed_run(sim, store)
        before = await store.load_run(Scope(run_id))
        upgraded = raygent.mcp.stdio(sys.executable, [SERVER, "--extra"], include=["add", "extra"])
        same = raygent.mcp.stdio(sys.executable, [SERVER], include=["add", "extra"])
        try:
            refused = await agent(sim, store, upgraded).resume(run_id)
            after = await store.load_run(Scope(run_id))
            requests = sim.stats().requests
            resumed = await agent(sim, store, same).resume(run_id)
        finally:
            await upgraded.aclose()
            await same.aclose()
    assert refused.status == "failed"
    assert isinstance(refused.error, DriftError)
    assert refused.error.details["changed"] == ["tools"]
    assert "tools (+extra)" in refused.error.message
    assert refused.error.details["current"]["tools"] == ["add", "extra"]
    assert before == after and requests == 2  # refused: nothing claimed, nothing sent
    assert resumed.ok, resumed.error
    assert resumed.text == FINAL.text
    assert resumed.report.resumes[-1].drift == [] and not resumed.report.resumes[-1].forced
    assert [c.output for c in resumed.report.tool_calls] == ["3"]  # not run again


async def test_force_resumes_with_the_changed_tool_list() -> None:
    store = InMemoryStore()
    async with serve(script(ADD, HANG, FINAL)) as sim:
        run_id = await crashed_run(sim, store)
        upgraded = raygent.mcp.stdio(sys.executable, [SERVER, "--extra"], include=["add", "extra"])
        try:
            done = await agent(sim, store, upgraded).resume(run_id, force=True)
        finally:
            await upgraded.aclose()
    assert done.ok, done.error
    assert done.report.resumes[-1].forced and done.report.resumes[-1].drift == ["tools"]


async def test_a_server_that_cannot_list_its_tools_fails_the_resume_typed() -> None:
    store = InMemoryStore()
    async with serve(script(ADD, HANG, FINAL)) as sim:
        run_id = await crashed_run(sim, store)
        broken = raygent.mcp.stdio(sys.executable, ["-c", "raise SystemExit(2)"], timeout=10)
        result = await agent(sim, store, broken).resume(run_id)
        record = await store.load_run(Scope(run_id))
    assert result.error is not None and result.error.code == "MCP_SERVER"
    assert record is not None and record.outcome is None  # still resumable

"""A batch on Ray runners with an MCP toolset: each runner process starts its own server."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil
import pytest
from backend_support import ray_test_backend

import raygent
import raygent.mcp
from raygent import OpenAIModel
from raygent._batch import BatchItem, batch
from raygent.sim import Match, Reply, Rule, ToolCallReply, serve

pytestmark = pytest.mark.usefixtures("ray_session")
SERVER = str(Path(__file__).with_name("server.py"))


async def test_a_batch_on_runners_opens_one_server_per_runner_process() -> None:
    toolset = raygent.mcp.stdio(sys.executable, [SERVER], include=["where"])
    rules = [
        Rule(
            match=Match(after_tool_result=False),
            reply=Reply(tool_calls=[ToolCallReply("where", {})]),
        ),
        Rule(match=Match(after_tool_result=True), reply=Reply(text="here")),
    ]
    async with serve(rules) as sim:
        model = OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-test")
        bot = raygent.agent(model=model, tools=[toolset], backend=ray_test_backend())
        result = await batch(bot, [f"q{i}" for i in range(24)], concurrency=8, runners=2)
    assert result.ok, [str(i.error) for i in result.items if not i.ok][:1]
    places = set()
    for item in result.items:
        [call] = item.result.report.tool_calls
        server, parent = (int(n) for n in (call.output or "").split())
        places.add((server, parent))
    parents = {parent for _, parent in places}
    assert os.getpid() not in parents  # the servers run beside the runners, not here
    assert len(places) == len(parents) <= 2  # one server per runner process


def _servers() -> list[psutil.Process]:
    """The live processes running this suite's MCP test server (any parent)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            cmdline = process.info["cmdline"] or []
        except psutil.Error:
            continue
        if SERVER in cmdline and process.status() != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


async def test_each_batch_closes_the_servers_it_opened_on_the_runners() -> None:
    # Before: every batch unpickled its agent in each runner and opened a server there
    # that nothing closed (1, 2, 3, then 5 servers alive after 4 batches on 2 runners).
    toolset = raygent.mcp.stdio(sys.executable, [SERVER], include=["where"])
    rules = [
        Rule(
            match=Match(after_tool_result=False),
            reply=Reply(tool_calls=[ToolCallReply("where", {})]),
        ),
        Rule(match=Match(after_tool_result=True), reply=Reply(text="here")),
    ]
    before = {p.pid for p in _servers()}
    peaks = []

    def count(item: BatchItem) -> None:
        peaks.append(len([p for p in _servers() if p.pid not in before]))

    async with serve(rules) as sim:
        model = OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-test")
        bot = raygent.agent(model=model, tools=[toolset], backend=ray_test_backend())
        # Four batches: the leak showed a third server alive during the third batch
        # (peak 3 > 2), five after the fourth; ten showed nothing more.
        for _ in range(4):
            items = [f"q{i}" for i in range(8)]
            result = await batch(bot, items, concurrency=8, runners=2, on_item=count)
            assert result.ok, [str(i.error) for i in result.items if not i.ok][:1]
    assert peaks and max(peaks) <= 2  # while running: at most one a runner
    deadline = time.monotonic() + 30
    while [p for p in _servers() if p.pid not in before] and time.monotonic() < deadline:
        psutil.wait_procs([p for p in _servers() if p.pid not in before], timeout=0.5)
    assert [p.pid for p in _servers() if p.pid not in before] == []  # none after

"""A batch on Ray runners with an MCP toolset: each runner process starts its own server."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from backend_support import ray_test_backend

import raygent
import raygent.mcp
from raygent import OpenAIModel
from raygent._batch import batch
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

"""MCP tools over streamable HTTP: the test server in a subprocess, an agent calling it."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import raygent
import raygent.mcp
from raygent import OpenAIModel
from raygent.sim import Match, Reply, Rule, ToolCallReply, serve

SERVER = str(Path(__file__).with_name("server.py"))


@pytest.fixture(scope="module")
def mcp_url() -> Iterator[str]:
    # Port 0: the server binds a free port and uvicorn prints which (the readiness signal).
    server = subprocess.Popen(
        [sys.executable, SERVER, "http", "0"], stderr=subprocess.PIPE, text=True
    )
    assert server.stderr is not None
    try:
        for line in server.stderr:
            found = re.search(r"running on (http://\S+)", line)
            if found:
                break
        else:
            raise AssertionError("the MCP server did not start")
        # Keep reading what it logs, so that a full pipe never blocks it.
        threading.Thread(target=server.stderr.read, daemon=True).start()
        yield f"{found[1]}/mcp"
    finally:
        server.terminate()
        server.wait(timeout=30)
        server.stderr.close()


async def test_an_agent_calls_tools_over_streamable_http(mcp_url: str, backend_kind: str) -> None:
    toolset = raygent.mcp.http(mcp_url, headers={"X-Test": "1"}, include=["add", "image"])
    rules = [
        Rule(
            match=Match(after_tool_result=False),
            reply=Reply(
                tool_calls=[
                    ToolCallReply("add", {"a": 20, "b": 22}),
                    ToolCallReply("image", {}),
                ]
            ),
        ),
        Rule(match=Match(after_tool_result=True), reply=Reply(text="42")),
    ]
    try:
        async with serve(rules) as sim:
            model = OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-test")
            bot = raygent.agent(model=model, tools=[toolset])
            result = await bot.execute("add")
        assert result.ok, result.error
        assert [c.output for c in result.report.tool_calls] == [
            "42",
            "[image image/png, 3 bytes: not shown]",
        ]
    finally:
        await toolset.aclose()

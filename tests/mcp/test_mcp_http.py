"""MCP tools over streamable HTTP: the test server in a subprocess, an agent calling it."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import raygent
import raygent.mcp
from raygent import OpenAIModel, Retry
from raygent.errors import MCPServerError
from raygent.sim import Match, Reply, Rule, ToolCallReply, serve
from raygent.tools import ToolContext

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
        assert [(c.output, c.images) for c in result.report.tool_calls] == [("42", 0), ("", 1)]
    finally:
        await toolset.aclose()


class Restartable:
    """The test server over HTTP on a port of its own, killed and started again there."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process: subprocess.Popen[str] | None = None
        self.reader: threading.Thread | None = None
        self.starts = 0
        self.start()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        self.stop()  # the process before (dead or alive) and its pipe
        self.starts += 1
        process = subprocess.Popen(
            [sys.executable, SERVER, "http", str(self.port)], stderr=subprocess.PIPE, text=True
        )
        self.process = process
        assert process.stderr is not None
        for line in process.stderr:
            if "running on" in line:
                break
        else:
            raise AssertionError("the MCP server did not start")
        self.reader = threading.Thread(target=process.stderr.read, daemon=True)
        self.reader.start()

    def wait(self) -> int:
        assert self.process is not None
        return self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.kill()
        self.process.wait(timeout=30)
        if self.reader is not None:
            self.reader.join(timeout=30)  # it read to the end of the pipe
        assert self.process.stderr is not None
        self.process.stderr.close()
        self.process = self.reader = None


@pytest.fixture
def restartable() -> Iterator[Restartable]:
    server = Restartable()
    try:
        yield server
    finally:
        server.stop()


def ctx(name: str) -> ToolContext:
    return ToolContext(
        run_id="r", root_run_id="r", session_id=None, call_id="c", tool_name=name, trip_index=0
    )


async def test_a_server_that_dies_mid_call_fails_typed_and_the_next_call_reconnects(
    restartable: Restartable,
) -> None:
    toolset = raygent.mcp.http(restartable.url, include=["crash", "pid"], timeout=30)
    try:
        tools = {t.name: t for t in await toolset.tools()}
        first = (await tools["pid"].invoke({}, ctx("pid"))).text  # type: ignore[attr-defined]
        with pytest.raises(MCPServerError, match="closed the connection during a call"):
            await tools["crash"].invoke({}, ctx("crash"))  # type: ignore[attr-defined]
        assert restartable.wait() == 3  # it died: os._exit(3)
        restartable.start()
        second = (await tools["pid"].invoke({}, ctx("pid"))).text  # type: ignore[attr-defined]
        assert int(second) == restartable.pid != int(first)
    finally:
        await toolset.aclose()


async def test_a_server_restarted_while_idle_serves_the_next_call_on_a_new_session(
    restartable: Restartable,
) -> None:
    toolset = raygent.mcp.http(restartable.url, include=["pid"], timeout=30)
    try:
        [pid] = await toolset.tools()
        before = (await pid.invoke({}, ctx("pid"))).text  # type: ignore[attr-defined]
        restartable.stop()
        restartable.start()  # a new process: it knows no session
        # The new server refuses the old session: that call never ran, so it is sent
        # again on a new session, and answered by the new process.
        again = (await pid.invoke({}, ctx("pid"))).text  # type: ignore[attr-defined]
        assert int(again) == restartable.pid != int(before)
        restartable.stop()
        restartable.start()
        # Listing again (a refresh) after a restart opens a new session the same way.
        assert [t.name for t in await toolset.refresh()] == ["pid"]
    finally:
        await toolset.aclose()


async def test_a_hanging_call_over_http_times_out_and_the_server_keeps_serving(
    restartable: Restartable, backend_kind: str
) -> None:
    toolset = raygent.mcp.http(restartable.url, include=["hang", "add"], timeout=5.0)
    rules = [
        Rule(
            match=Match(after_tool_result=False),
            reply=Reply(tool_calls=[ToolCallReply("hang", {})]),
        ),
        Rule(match=Match(after_tool_result=True), reply=Reply(text="gave up")),
    ]
    try:
        async with serve(rules) as sim:
            model = OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-test")
            result = await raygent.agent(model=model, tools=[toolset]).execute("hang")
        assert result.ok, result.error
        assert (result.report.tool_calls[0].error or {}).get("code") == "TOOL_TIMEOUT"
        [add] = [t for t in await toolset.tools() if t.name == "add"]
        assert (await add.invoke({"a": 1, "b": 2}, ctx("add"))).text == "3"  # type: ignore[attr-defined]
    finally:
        await toolset.aclose()


async def test_a_server_that_cannot_be_reached_at_start_fails_retryable(
    restartable: Restartable,
) -> None:
    restartable.stop()  # nothing listens on its port: refused, a brief outage maybe
    toolset = raygent.mcp.http(restartable.url, timeout=10)
    with pytest.raises(MCPServerError, match="could not be started: ConnectError") as caught:
        await toolset.tools()
    assert caught.value.retryable is True
    await toolset.aclose()


async def test_a_wrong_url_fails_for_good(mcp_url: str) -> None:
    toolset = raygent.mcp.http(mcp_url.replace("/mcp", "/nothing-here"), timeout=10)
    with pytest.raises(MCPServerError, match="could not be started: HTTP 404") as caught:
        await toolset.tools()
    assert caught.value.retryable is False  # no retry finds what is not there
    await toolset.aclose()


async def test_a_batch_retries_an_item_whose_server_was_briefly_down(
    restartable: Restartable,
) -> None:
    # On the local backend: the retry's wait starts the server from this process.
    restartable.stop()
    toolset = raygent.mcp.http(restartable.url, include=["add"], timeout=10)
    rules = [
        Rule(
            match=Match(after_tool_result=False),
            reply=Reply(tool_calls=[ToolCallReply("add", {"a": 1, "b": 2})]),
        ),
        Rule(match=Match(after_tool_result=True), reply=Reply(text="3")),
    ]

    async def back_up(delay: float) -> None:  # the retry's wait: the server comes back
        await asyncio.to_thread(restartable.start)

    try:
        async with serve(rules) as sim:
            model = OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-test")
            bot = raygent.agent(model=model, tools=[toolset])
            down = await bot.execute("add")
            assert down.error is not None and down.error.code == "MCP_SERVER"
            assert down.error.retryable and len(sim.requests) == 0  # before any request
            result = await raygent.batch(bot, ["add"], retry=Retry(attempts=3, sleep=back_up))
        assert result.ok, [str(i.error) for i in result.items]
        [item] = result.items
        assert item.attempts == 2 and restartable.starts == 2
        assert item.result.report.tool_calls[0].output == "3"
    finally:
        await toolset.aclose()

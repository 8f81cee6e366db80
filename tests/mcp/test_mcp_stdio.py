"""MCP tools over stdio, called directly (no agent): listing, results, failures."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import logging
import os
import pickle
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

import raygent.mcp
from raygent.errors import MCPServerError, ToolExecutionError
from raygent.messages import ImagePart
from raygent.tools import ToolArgumentsError, ToolContext, ToolResult, ToolTimeoutError

SERVER = str(Path(__file__).with_name("server.py"))
PNG = (  # the server's 1x1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="
)


def ctx(name: str) -> ToolContext:
    return ToolContext(
        run_id="r", root_run_id="r", session_id=None, call_id="c", tool_name=name, trip_index=0
    )


async def by_name(toolset: raygent.mcp.MCPToolset) -> dict[str, object]:
    return {t.name: t for t in await toolset.tools()}


async def listed(toolset: raygent.mcp.MCPToolset, name: str) -> Any:
    deadline = asyncio.get_running_loop().time() + 10
    while name not in (tools := await by_name(toolset)):
        assert asyncio.get_running_loop().time() < deadline, f"{name} never listed"
        await asyncio.sleep(0.01)
    return tools[name]


async def test_tools_are_listed_filtered_and_prefixed() -> None:
    toolset = raygent.mcp.stdio(sys.executable, [SERVER], prefix="m_", exclude=["crash"])
    try:
        tools = await by_name(toolset)
        assert "m_add" in tools and "m_crash" not in tools
        add = tools["m_add"]
        spec = add.spec()  # type: ignore[attr-defined]
        assert spec.description == "Add two integers."
        assert spec.parameters["required"] == ["a", "b"]
        assert "title" not in str(add.spec(compact=True).parameters)  # type: ignore[attr-defined]
        assert add.inline  # type: ignore[attr-defined]
        added = await add.invoke({"a": 2, "b": 3}, ctx("m_add"))  # type: ignore[attr-defined]
        assert added == ToolResult(content=["5"], data={"result": 5})
        again = await toolset.tools()
        assert again[0] is tools[again[0].name]  # cached, not listed again
        only = raygent.mcp.stdio(sys.executable, [SERVER], include=["add", "pid"])
        assert sorted(await by_name(only)) == ["add", "pid"]
        await only.aclose()
    finally:
        await toolset.aclose()


async def test_arguments_failing_the_schema_are_refused_before_the_call() -> None:
    toolset = raygent.mcp.stdio(sys.executable, [SERVER])
    try:
        add = (await by_name(toolset))["add"]
        with pytest.raises(ToolArgumentsError) as caught:
            await add.invoke({"a": "two"}, ctx("add"))  # type: ignore[attr-defined]
        assert caught.value.code == "TOOL_INVALID_ARGUMENTS"
        assert "'b' is a required property" in str(caught.value)
    finally:
        await toolset.aclose()


async def test_is_error_image_and_structured_results() -> None:
    toolset = raygent.mcp.stdio(sys.executable, [SERVER])
    try:
        tools = await by_name(toolset)
        with pytest.raises(ToolExecutionError, match="Error executing tool fail"):
            await tools["fail"].invoke({}, ctx("fail"))  # type: ignore[attr-defined]
        image = await tools["image"].invoke({}, ctx("image"))  # type: ignore[attr-defined]
        assert image == ToolResult(content=[ImagePart(data=PNG, media_type="image/png")])
        chart = await tools["chart"].invoke({}, ctx("chart"))  # type: ignore[attr-defined]
        assert chart.content == [
            "the chart:",
            ImagePart(data=PNG, media_type="image/png"),
            "\n[audio audio/wav, 4 bytes: not shown]",  # no wire takes audio in a result
        ]
        weather = await tools["weather"].invoke({"city": "Oslo"}, ctx("weather"))  # type: ignore[attr-defined]
        assert weather == ToolResult(content=["Oslo: 18C"], data={"city": "Oslo", "celsius": 18})
        reading = await tools["reading"].invoke({}, ctx("reading"))  # type: ignore[attr-defined]
        assert reading == ToolResult(content=['{"celsius":18}'], data={"celsius": 18})
    finally:
        await toolset.aclose()


async def test_a_server_that_dies_mid_call_is_restarted_on_the_next_call() -> None:
    toolset = raygent.mcp.stdio(sys.executable, [SERVER])
    try:
        tools = await by_name(toolset)
        first = (await tools["pid"].invoke({}, ctx("pid"))).text  # type: ignore[attr-defined]
        with pytest.raises(MCPServerError) as caught:
            await tools["crash"].invoke({}, ctx("crash"))  # type: ignore[attr-defined]
        assert caught.value.code == "MCP_SERVER"
        assert str(caught.value).endswith("during a call to 'crash': it exited with code 3")
        second = (await tools["pid"].invoke({}, ctx("pid"))).text  # type: ignore[attr-defined]
        assert second != first
    finally:
        await toolset.aclose()


async def test_a_server_that_died_while_idle_is_restarted_by_the_next_call() -> None:
    toolset = raygent.mcp.stdio(sys.executable, [SERVER])
    try:
        tools = await by_name(toolset)
        first = int((await tools["pid"].invoke({}, ctx("pid"))).text)  # type: ignore[attr-defined]
        os.kill(first, signal.SIGKILL)
        deadline = asyncio.get_running_loop().time() + 10
        while toolset.connected:  # until this side has read the end of the server's output
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        second = (await tools["pid"].invoke({}, ctx("pid"))).text  # type: ignore[attr-defined]
        assert int(second) != first
    finally:
        await toolset.aclose()


async def test_a_hanging_call_times_out_and_the_server_keeps_serving() -> None:
    # The timeout bounds the start too: room for a slow start on a loaded machine.
    toolset = raygent.mcp.stdio(sys.executable, [SERVER], timeout=5.0)
    try:
        tools = await by_name(toolset)
        with pytest.raises(ToolTimeoutError):
            await tools["hang"].invoke({}, ctx("hang"))  # type: ignore[attr-defined]
        assert (await tools["add"].invoke({"a": 1, "b": 1}, ctx("add"))).text == "2"  # type: ignore[attr-defined]
    finally:
        await toolset.aclose()


async def test_a_server_that_cannot_start_is_a_typed_error() -> None:
    toolset = raygent.mcp.stdio(sys.executable, ["-c", "import sys; sys.exit(2)"], timeout=10)
    with pytest.raises(MCPServerError, match=r"could not be started: it exited with code 2$"):
        await toolset.tools()
    await toolset.aclose()
    missing = raygent.mcp.stdio("/nonexistent/mcp-server", timeout=10)
    with pytest.raises(MCPServerError, match="could not be started: FileNotFoundError") as caught:
        await missing.tools()
    assert caught.value.retryable is False  # a bad command: trying again will not help
    await missing.aclose()


LEGACY_ERROR = "AttributeError: 'Server' object has no attribute 'list_resources'"


async def test_a_server_that_dies_at_start_says_its_exit_code_and_last_stderr_lines() -> None:
    # An mcp 1.x server under the 2.x SDK: the reason is on its stderr, not in the protocol.
    toolset = raygent.mcp.stdio(sys.executable, [SERVER, "--v1"], timeout=30, stderr=io.StringIO())
    with pytest.raises(MCPServerError) as caught:
        await toolset.tools()
    message = str(caught.value)
    assert "could not be started: it exited with code 1" in message
    assert message.endswith(LEGACY_ERROR)  # the last line of its stderr
    assert "starting the 1.x server" in message  # and the lines before
    assert caught.value.retryable is False  # the server is broken: for its owner to fix
    await toolset.aclose()


async def test_the_servers_stderr_goes_to_a_file_a_logger_a_stream_or_ours(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    async def start(stderr: Any) -> None:
        toolset = raygent.mcp.stdio(sys.executable, [SERVER, "--v1"], timeout=30, stderr=stderr)
        with pytest.raises(MCPServerError, match="exited with code 1"):
            await toolset.tools()
        await toolset.aclose()

    log = tmp_path / "server.log"
    await start(log)
    await start(str(log))  # appended
    assert log.read_text().count(LEGACY_ERROR) == 2
    assert log.read_text().startswith("starting the 1.x server\nTraceback")

    logger = logging.getLogger("tests.mcp.server")
    with caplog.at_level(logging.INFO, logger=logger.name):
        await start(logger)
    lines = [r.getMessage() for r in caplog.records if r.name == logger.name]
    assert lines[0] == "starting the 1.x server" and lines[-1] == LEGACY_ERROR

    stream = io.StringIO()
    await start(stream)
    assert stream.getvalue().endswith(LEGACY_ERROR + "\n")

    capfd.readouterr()
    await start(None)  # the default: this process's stderr
    assert LEGACY_ERROR in capfd.readouterr().err

    # A path or a logger travels with the toolset (to a Ray worker).
    copy = pickle.loads(pickle.dumps(raygent.mcp.stdio(sys.executable, [SERVER], stderr=logger)))
    assert copy._transport.stderr is logger  # type: ignore[attr-defined]


async def test_a_list_changed_notification_lists_the_tools_again() -> None:
    toolset = raygent.mcp.stdio(sys.executable, [SERVER])
    try:
        tools = await by_name(toolset)
        assert "late" not in tools
        assert (await tools["grow"].invoke({}, ctx("grow"))).text == "grown"  # type: ignore[attr-defined]
        # The SDK hands the notification to a task of its own: wait (bounded) for it.
        late = await listed(toolset, "late")
        assert (await late.invoke({}, ctx("late"))).text == "late tool"
    finally:
        await toolset.aclose()


async def test_refresh_lists_the_tools_again() -> None:
    toolset = raygent.mcp.stdio(sys.executable, [SERVER])
    try:
        first = await toolset.tools()
        again = await toolset.refresh()
        assert [t.name for t in again] == [t.name for t in first]
        assert again[0] is not first[0]
    finally:
        await toolset.aclose()


def servers() -> list[psutil.Process]:
    """The test server processes this process started (zombies are gone already); not
    the ones Ray's workers started, which are further down."""
    found = []
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            if SERVER in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
    return found


async def test_toolsets_dropped_without_aclose_stop_their_servers() -> None:
    assert servers() == []
    toolsets = [raygent.mcp.stdio(sys.executable, [SERVER], include=["pid"]) for _ in range(3)]
    pids = set()
    for toolset in toolsets:
        [pid] = await toolset.tools()
        pids.add(int((await pid.invoke({}, ctx("pid"))).text))  # type: ignore[attr-defined]
        del pid
    assert {p.pid for p in servers()} == pids and len(pids) == 3
    del toolset, toolsets  # dropped, never closed
    gc.collect()
    deadline = asyncio.get_running_loop().time() + 20
    while servers():
        assert asyncio.get_running_loop().time() < deadline, servers()
        await asyncio.sleep(0.05)


def test_a_toolset_dropped_after_its_loop_ended_stops_its_server() -> None:
    # asyncio.run cancels the connection's task at its end (that stops the server); a
    # loop that is only stopped leaves it running, with no loop to run a shutdown: the
    # finalizer stops the process itself.
    loop = asyncio.new_event_loop()
    toolset = raygent.mcp.stdio(sys.executable, [SERVER], include=["pid"])
    try:
        [pid] = loop.run_until_complete(toolset.tools())
        del pid
        assert len(servers()) == 1
        del toolset
        gc.collect()
        deadline = time.monotonic() + 20
        while servers():
            assert time.monotonic() < deadline, servers()
            time.sleep(0.05)
    finally:
        loop.close()

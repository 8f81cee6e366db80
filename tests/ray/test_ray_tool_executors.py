"""Tool calls on the tool executors (real Ray): a tool that asks for no placement runs on
a long-lived executor of this node, the calls of a trip travel together, a stuck or
crashing tool costs only its own call, and no worker process starts per call.

The executor's own behaviour, in-process, is in test_tool_executor.py."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest
from ray_support import backend, wait_for_file, wait_until_dead, write_whole

import raygent
from raygent import AbortController, ToolContext, ToolMessage
from raygent.errors import ToolExecutionError
from raygent.seams.contract import Backend
from raygent.testing import ScriptedModel, call, reply
from raygent.tools import ToolTimeoutError

pytestmark = pytest.mark.usefixtures("ray_session")


def note(path: Path, text: str = "") -> None:
    with open(path, "a") as file:
        file.write(text + "\n")


def ray_workers() -> set[int]:
    """The `ray::` worker processes of this test session's Ray: the descendants of this
    process (which started it) whose title starts with `ray::` (read from /proc)."""
    parents, titles = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                titles[int(entry)] = f.read().split(b"\0")[0]
        except OSError:
            continue  # it ended meanwhile
    found = set()
    for pid, title in titles.items():
        walk = pid
        while walk in parents and walk not in (0, 1, os.getpid()):
            walk = parents[walk]
        if walk == os.getpid() and title.startswith(b"ray::"):
            found.add(pid)
    return found


async def run(on: Backend, tool: raygent.Tool[..., Any], **arguments: Any) -> raygent.AgentResult:
    model = ScriptedModel([reply(tool_calls=[call(tool.name, arguments)]), "done"])
    return await raygent.agent(model=model, tools=[tool], backend=on).execute("go")


async def output(on: Backend, tool: raygent.Tool[..., Any], **arguments: Any) -> str:
    result = await run(on, tool, **arguments)
    [record] = result.report.tool_calls
    assert record.output is not None, record.error
    return record.output


async def executor_pids(on: Backend) -> set[int]:
    return {stats["pid"] for stats in await on.tools.executor_stats()}  # type: ignore[attr-defined]


@raygent.tool
def where() -> int:
    """This process."""
    return os.getpid()


@raygent.tool
async def nap(n: int) -> int:
    """A short I/O wait."""
    await asyncio.sleep(0.05)
    return os.getpid()


@raygent.tool
async def tag(n: int) -> str:
    """n and this process."""
    return f"{n}@{os.getpid()}"


async def test_a_default_tool_runs_on_an_executor_shared_by_calls_and_runs() -> None:
    on = backend()
    pids = {int(await output(on, where)) for _ in range(3)}
    assert len(pids) == 1 and os.getpid() not in pids
    assert pids <= await executor_pids(on)


async def test_sixty_four_runs_at_once_start_no_ray_worker_process() -> None:
    on = backend()
    executors = await executor_pids(on)  # created if need be, before counting
    await output(on, nap, n=0)
    before = ray_workers()
    assert executors <= before  # what is counted: the executors are among them
    outputs = await asyncio.gather(*(output(on, nap, n=n) for n in range(64)))
    assert {int(pid) for pid in outputs} <= executors
    assert ray_workers() - before == set()


async def test_the_calls_of_a_trip_travel_in_one_remote_call_per_executor() -> None:
    on = backend()
    before = {s["pid"]: s for s in await on.tools.executor_stats()}  # type: ignore[attr-defined]
    # Call ids the other way round: answers are matched by call, in the model's order.
    calls = [call("tag", {"n": n}, call_id=f"c{5 - n}") for n in range(6)]
    model = ScriptedModel([reply(tool_calls=calls), "done"])
    result = await raygent.agent(model=model, tools=[tag], backend=on).execute("go")
    assert result.ok, result.error
    sent, _ = model.requests[1]
    replies = [(m.call_id, m.text.split("@")) for m in sent if isinstance(m, ToolMessage)]
    assert [(call_id, n) for call_id, (n, _) in replies] == [
        (f"c{5 - n}", str(n)) for n in range(6)
    ]
    used = {int(pid) for _, (_, pid) in replies}
    after = {s["pid"]: s for s in await on.tools.executor_stats()}  # type: ignore[attr-defined]
    assert used <= set(before) == set(after)
    assert sum(after[p]["calls"] - before[p]["calls"] for p in after) == 6
    # One remote call per executor the trip touched, not one per call.
    assert sum(after[p]["batches"] - before[p]["batches"] for p in after) == len(used)
    assert max(after[p]["largest_batch"] for p in used) >= 3


@raygent.tool(timeout=3)
async def awaits_forever(marks: str) -> str:
    """Never returns (cancellable)."""
    note(Path(marks), "started")
    try:
        await asyncio.get_running_loop().create_future()
    except asyncio.CancelledError:
        note(Path(marks), "cancelled")
        raise
    return "never"


@raygent.tool(timeout=3)
def sleeps_in_c(started: str) -> str:
    """Blocked in C, where no interrupt lands."""
    write_whole(started, str(os.getpid()))
    time.sleep(60)
    return "too late"


async def test_tools_that_block_forever_stop_at_their_timeout_without_blocking_their_executor(
    tmp_path: Path,
) -> None:
    on = backend(tool_executors=1)  # one executor: every call below goes to it
    marks, started = tmp_path / "marks", tmp_path / "started"
    model = ScriptedModel(
        [
            reply(
                tool_calls=[
                    call("awaits_forever", {"marks": str(marks)}),
                    call("sleeps_in_c", {"started": str(started)}),
                ]
            ),
            "moved on",
        ]
    )
    hung = asyncio.ensure_future(
        raygent.agent(model=model, tools=[awaits_forever, sleeps_in_c], backend=on).execute("go")
    )
    await wait_for_file(started)
    await wait_for_file(marks)
    executor = int(started.read_text())
    # Meanwhile the same executor serves other runs, at once.
    for _ in range(5):
        assert int(await output(on, where)) == executor
    assert not hung.done()
    result = await hung
    assert result.ok and result.text == "moved on"
    errors = [record.error for record in result.report.tool_calls]
    assert all(e and e["type"] == ToolTimeoutError.__name__ for e in errors), errors
    assert marks.read_text().split() == ["started", "cancelled"]
    # The tool blocked in C outlived its grace: its executor retired and exited...
    await wait_until_dead(executor)
    # ... and the next call, not idempotent, runs on one made anew (it never ran on the
    # old one, so it is not failed).
    assert int(await output(on, where)) not in {executor, os.getpid()}


@raygent.tool
def hogs_the_gil(started: str, seconds: float) -> int:
    """A pure-Python busy loop: it holds the GIL of its process."""
    Path(started).write_text("go")
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        n += 1
    return os.getpid()


@raygent.tool
async def quick() -> int:
    """An async tool that answers at once."""
    return os.getpid()


async def test_a_sync_tool_that_holds_the_gil_does_not_stall_async_tools_elsewhere(
    tmp_path: Path,
) -> None:
    on = backend()  # two executors
    await executor_pids(on)
    started = tmp_path / "started"
    hog = asyncio.ensure_future(output(on, hogs_the_gil, started=str(started), seconds=2.0))
    await wait_for_file(started)
    latencies, pids = [], set()
    for _ in range(10):
        clock = time.monotonic()
        pids.add(int(await output(on, quick)))
        latencies.append(time.monotonic() - clock)
    assert not hog.done()  # all of them ran while it was busy
    assert int(await hog) not in pids  # on the other executor: the hog's has a call in flight
    assert max(latencies) < 0.25, latencies


@raygent.tool
def ends_its_process(marker: str) -> str:
    """Kills the process it runs in."""
    Path(marker).write_text(str(os.getpid()))
    os._exit(1)


async def test_a_tool_that_kills_its_executor_fails_typed_and_the_executor_is_replaced(
    tmp_path: Path,
) -> None:
    on = backend()
    marker = tmp_path / "pid"
    result = await run(on, ends_its_process, marker=str(marker))
    assert result.ok and result.text == "done"  # the run goes on; the model hears of it
    [record] = result.report.tool_calls
    assert record.error and record.error["type"] == ToolExecutionError.__name__
    assert "worker failed" in record.error["message"]
    assert "not retried" in record.error["message"]
    dead = int(marker.read_text())
    await wait_until_dead(dead)
    replaced = int(await output(on, where))
    assert replaced != dead and replaced in await executor_pids(on)


@raygent.tool
async def awaits_abort(ctx: ToolContext, marks: str) -> str:
    """Waits until cancelled; says whether its signal had fired by then."""
    note(Path(marks), "started")
    try:
        await asyncio.get_running_loop().create_future()
    except asyncio.CancelledError:
        assert ctx.signal is not None
        note(Path(marks), f"cancelled, signal aborted: {ctx.signal.aborted}")
        raise
    return "never"


@raygent.tool
def loops_until_interrupted(marks: str) -> str:
    """A sync tool in a loop of short sleeps."""
    note(Path(marks), "started")
    try:
        for _ in range(600):
            time.sleep(0.1)
    except KeyboardInterrupt:
        note(Path(marks), "KeyboardInterrupt")
        raise
    return "finished"


async def test_aborting_a_run_cancels_its_calls_on_the_executors(tmp_path: Path) -> None:
    async_marks, sync_marks = tmp_path / "async", tmp_path / "sync"
    model = ScriptedModel(
        [
            reply(
                tool_calls=[
                    call("awaits_abort", {"marks": str(async_marks)}),
                    call("loops_until_interrupted", {"marks": str(sync_marks)}),
                ]
            )
        ]
    )
    controller = AbortController()
    bot = raygent.agent(
        model=model, tools=[awaits_abort, loops_until_interrupted], backend=backend()
    )
    running = asyncio.ensure_future(bot.execute("go", signal=controller.signal))
    await wait_for_file(async_marks)
    await wait_for_file(sync_marks)
    controller.abort("enough")
    assert (await running).report.status == "cancelled"
    await _wait_for_lines(async_marks, 2)
    await _wait_for_lines(sync_marks, 2)
    assert lines(async_marks)[1] == "cancelled, signal aborted: True"
    assert lines(sync_marks)[1] == "KeyboardInterrupt"


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


async def _wait_for_lines(path: Path, count: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while len(lines(path)) < count:
        assert time.monotonic() < deadline, f"{path.name}: {lines(path)}"
        await asyncio.sleep(0.02)

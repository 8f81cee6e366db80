"""The tool executor as a plain class, in this process (no Ray): batches answered by call
key, timeouts, cancellation, outcomes that cannot travel, the tool cache, retiring and
the idle exit. Ray's side of it is in test_ray_tool_executors.py."""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import raygent
from raygent import ToolContext
from raygent.actors.tools.executor import Retiring, ToolCallSpec, ToolExecutor, UnknownTools
from raygent.actors.tools.executor_pool import _pickled_tool
from raygent.actors.tools.outcomes import Failed, TimedOut
from raygent.errors import ToolExecutionError

GRACE = 0.2


def spec(
    key: str,
    tool: raygent.Tool[..., Any],
    timeout: float | None = None,
    ctx: ToolContext | None = None,
    **kwargs: Any,
) -> ToolCallSpec:
    return ToolCallSpec(key, _pickled_tool(tool)[0], kwargs, ctx, timeout, GRACE)


def shipped(*tools: raygent.Tool[..., Any]) -> dict[str, bytes]:
    return dict(_pickled_tool(tool) for tool in tools)


def outcome(answer: Any, key: str) -> Any:
    assert isinstance(answer, dict), answer
    return pickle.loads(answer[key])


def context(call_id: str) -> ToolContext:
    return ToolContext("run", "run", None, call_id, "tool", 0)


def note(path: str, text: str) -> None:
    # Written aside and renamed: a test that sees the file must see its text (a plain
    # write_text creates it empty first, and a reader once read it so, in CI).
    aside = Path(f"{path}.writing")
    aside.write_text(text)
    aside.replace(path)


async def wait_until(check: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "never happened"
        await asyncio.sleep(0.01)


@raygent.tool
async def echo(text: str) -> str:
    """Echo."""
    await asyncio.sleep(0)
    return text


@raygent.tool
def shout(text: str) -> str:
    """Upper case (sync: in a thread)."""
    return text.upper()


@raygent.tool
def unpicklable() -> Any:
    """Returns what cannot be pickled."""
    return threading.Lock()


@raygent.tool
def fails() -> str:
    """Raises."""
    raise ValueError("no luck")


@raygent.tool
async def hangs(ctx: ToolContext, marks: str) -> str:
    """Awaits forever; says what it saw when it was stopped."""
    try:
        await asyncio.get_running_loop().create_future()
    except asyncio.CancelledError:
        assert ctx.signal is not None
        note(marks, f"cancelled, signal {ctx.signal.aborted}: {ctx.signal.reason}")
        raise
    return "never"


@raygent.tool
def spins(marks: str) -> str:
    """A sync tool in a pure-Python loop: an asynchronous exception lands in it."""
    try:
        while True:
            time.sleep(0.01)
    except BaseException as exc:
        note(marks, type(exc).__name__)
        raise


@raygent.tool
def stubborn(release: str) -> str:
    """Runs on through its interrupts until released (as one blocked in C would)."""
    while not Path(release).exists():
        with contextlib.suppress(BaseException):
            time.sleep(0.01)
    return "released"


async def test_a_batch_is_answered_by_call_key() -> None:
    executor = ToolExecutor(leave=lambda: None)
    calls = [
        spec("a", echo, text="one"),
        spec("b", shout, text="two"),
        spec("c", fails),
        spec("d", unpicklable),
    ]
    answer = await executor.run(calls, shipped(echo, shout, fails, unpicklable))
    assert isinstance(answer, dict) and set(answer) == {"a", "b", "c", "d"}
    assert outcome(answer, "a") == "one" and outcome(answer, "b") == "TWO"
    failed = outcome(answer, "c")
    assert isinstance(failed, Failed) and isinstance(failed.error, ValueError)
    # A value that cannot be pickled fails its own call only, typed.
    bad = outcome(answer, "d")
    assert isinstance(bad, Failed) and isinstance(bad.error, ToolExecutionError)
    assert "cannot be sent back" in str(bad.error)
    stats = await executor.stats()
    assert (stats["batches"], stats["calls"], stats["largest_batch"]) == (1, 4, 4)


async def test_tools_arrive_once_and_an_unknown_key_runs_nothing() -> None:
    executor = ToolExecutor(leave=lambda: None)
    refused = await executor.run([spec("a", echo, text="x"), spec("b", shout, text="y")])
    assert isinstance(refused, UnknownTools)
    assert set(refused.keys) == {_pickled_tool(echo)[0], _pickled_tool(shout)[0]}
    assert (await executor.stats())["batches"] == 0  # nothing ran
    first = await executor.run([spec("a", echo, text="x")], shipped(echo))
    assert outcome(first, "a") == "x"
    again = await executor.run([spec("b", echo, text="y")])  # known now: no bytes sent
    assert outcome(again, "b") == "y"
    # Bytes that cannot be loaded here: the call fails typed, the batch goes on.
    broken = {"0badc0ffee": b"not a pickle"}
    call = ToolCallSpec("c", "0badc0ffee", {}, None, None, GRACE)
    answer = await executor.run([call, spec("d", echo, text="z")], broken)
    failed = outcome(answer, "c")
    assert isinstance(failed, Failed) and "cannot be loaded" in str(failed.error)
    assert outcome(answer, "d") == "z"


async def test_a_timeout_stops_its_tool_and_not_the_others(tmp_path: Path) -> None:
    executor = ToolExecutor(leave=lambda: None)
    async_marks, sync_marks = tmp_path / "async", tmp_path / "sync"
    calls = [
        spec("a", hangs, timeout=0.1, ctx=context("a"), marks=str(async_marks)),
        spec("b", spins, timeout=0.1, marks=str(sync_marks)),
        spec("c", echo, text="fine"),
    ]
    clock = time.monotonic()
    answer = await executor.run(calls, shipped(hangs, spins, echo))
    assert time.monotonic() - clock < 2
    assert isinstance(outcome(answer, "a"), TimedOut)
    assert isinstance(outcome(answer, "b"), TimedOut)
    assert outcome(answer, "c") == "fine"
    # The signal fired first, then the tool was interrupted.
    assert async_marks.read_text() == "cancelled, signal True: tool call timed out"
    await wait_until(sync_marks.exists)
    assert sync_marks.read_text() == "ToolTimedOut"
    stats = await executor.stats()
    assert stats["timed_out"] == 2 and not stats["retiring"]


async def test_cancelling_some_calls_of_a_batch_interrupts_only_those(tmp_path: Path) -> None:
    executor = ToolExecutor(leave=lambda: None)
    marks = tmp_path / "spins"
    # Cancelled before it arrives (Ray may deliver the cancel first): it never runs.
    await executor.cancel(["early"])
    calls = [
        spec("spin", spins, marks=str(marks)),
        spec("early", echo, text="never"),
        spec("late", echo, text="ran"),
    ]
    batch = asyncio.ensure_future(executor.run(calls, shipped(spins, echo)))
    await wait_until(lambda: executor._running.get("spin") is not None)
    await executor.cancel(["spin"])
    answer = await asyncio.wait_for(batch, 5)
    assert outcome(answer, "late") == "ran"
    assert isinstance(outcome(answer, "early"), Failed)
    await wait_until(marks.exists)
    assert marks.read_text() == "KeyboardInterrupt"  # as a cancelled Ray task is told


async def test_cancelling_the_batch_interrupts_every_call(tmp_path: Path) -> None:
    executor = ToolExecutor(leave=lambda: None)
    async_marks, sync_marks = tmp_path / "async", tmp_path / "sync"
    calls = [
        spec("a", hangs, ctx=context("a"), marks=str(async_marks)),
        spec("b", spins, marks=str(sync_marks)),
    ]
    batch = asyncio.ensure_future(executor.run(calls, shipped(hangs, spins)))
    await wait_until(lambda: len(executor._running) == 2)
    batch.cancel()  # what ray.cancel does to the actor's task
    with pytest.raises(asyncio.CancelledError):
        await batch
    await wait_until(lambda: async_marks.exists() and sync_marks.exists())
    assert async_marks.read_text() == "cancelled, signal True: tool call cancelled"
    assert sync_marks.read_text() == "KeyboardInterrupt"


async def test_a_stuck_tool_retires_its_executor_after_its_other_calls(tmp_path: Path) -> None:
    left = threading.Event()
    executor = ToolExecutor(leave=left.set)
    stuck, slow = tmp_path / "stuck", tmp_path / "slow"
    try:
        stuck_call = spec("stuck", stubborn, timeout=0.1, release=str(stuck))
        answer = await executor.run([stuck_call], shipped(stubborn))
        assert isinstance(outcome(answer, "stuck"), TimedOut)
        # Another call, started before the executor finds out, is let finish.
        running = asyncio.ensure_future(executor.run([spec("slow", stubborn, release=str(slow))]))
        await wait_until(lambda: executor._counts["stuck"] == 1)
        refused = await executor.run([spec("new", echo, text="x")], shipped(echo))
        assert isinstance(refused, Retiring)  # nothing run: the caller goes elsewhere
        assert (await executor.stats())["retiring"]
        assert executor._leaving is None and not left.is_set()  # not while "slow" runs
        slow.write_text("go")
        assert outcome(await running, "slow") == "released"
        await wait_until(left.is_set)
    finally:
        stuck.write_text("go")


async def test_an_idle_executor_leaves_on_its_own() -> None:
    called, never_called = threading.Event(), threading.Event()
    executor = ToolExecutor(idle_timeout=0.2, leave=called.set)
    ToolExecutor(idle_timeout=0.2, leave=never_called.set)  # its creator went away
    answer = await executor.run([spec("a", echo, text="x")], shipped(echo))
    assert outcome(answer, "a") == "x"
    await wait_until(lambda: called.is_set() and never_called.is_set())
    assert isinstance(await executor.run([spec("b", echo, text="y")]), Retiring)

"""Tool calls as Ray tasks: placement and resources, timeouts, retries of idempotent
tools when a worker dies, inline tools, cancellation."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from ray_support import backend, wait_for_file, wait_until_dead

import raygent
from raygent import AbortController, ToolContext
from raygent.errors import ToolExecutionError
from raygent.testing import ScriptedModel, call, reply
from raygent.tools import ToolTimeoutError

pytestmark = pytest.mark.usefixtures("ray_session")

RESOURCE = "raygent_test_slot"  # the session's ray.init declares 4 of them


def calling(name: str, arguments: dict[str, Any], then: str = "done") -> ScriptedModel:
    """A model that calls one tool, then answers `then` (it runs in-process on Ray)."""
    return ScriptedModel([reply(tool_calls=[call(name, arguments)]), then])


async def run_tool(tool: raygent.Tool[..., Any], **arguments: Any) -> raygent.AgentResult:
    bot = raygent.agent(model=calling(tool.name, arguments), tools=[tool], backend=backend())
    return await bot.execute("go")


@raygent.tool(num_cpus=2, resources={RESOURCE: 1})
def placed(ctx: ToolContext) -> dict[str, Any]:
    """Where the task ran and what it was given."""
    context = ray.get_runtime_context()
    return {
        "pid": os.getpid(),
        "resources": context.get_assigned_resources(),
        "run_id": ctx.run_id,
        "call_id": ctx.call_id,
        "signal": None if ctx.signal is None else ctx.signal.aborted,
    }


@raygent.tool(inline=True)
def inline_pid() -> int:
    """Runs in the caller."""
    return os.getpid()


async def test_a_tool_task_runs_on_a_worker_with_its_resources() -> None:
    result = await run_tool(placed)
    [record] = result.report.tool_calls
    output = raygent.messages.parse_arguments(record.output or "")
    assert output is not None, record.error
    assert output["pid"] != os.getpid()
    assert output["resources"] == {"CPU": 2.0, RESOURCE: 1.0}
    assert output["run_id"] == result.report.run_id and output["call_id"] == record.call_id
    # The run's signal stays in the caller; the task has one of its own, not fired.
    assert output["signal"] is False


async def test_an_inline_tool_runs_in_the_caller() -> None:
    result = await run_tool(inline_pid)
    assert result.report.tool_calls[0].output == str(os.getpid())


@raygent.tool(timeout=0.5)
def blocked(started: str) -> str:
    """Blocks far past its timeout, where no KeyboardInterrupt can land."""
    Path(started).write_text(str(os.getpid()))
    time.sleep(60)
    return "too late"


async def test_a_tool_that_times_out_is_stopped(tmp_path: Path) -> None:
    started = tmp_path / "started"
    clock = time.monotonic()
    result = await run_tool(blocked, started=str(started))
    assert time.monotonic() - clock < 10
    assert result.ok and result.text == "done"  # the run goes on; the model hears of it
    [record] = result.report.tool_calls
    assert record.error and record.error["type"] == ToolTimeoutError.__name__
    # Still blocked after the grace period: its worker process is killed.
    await wait_until_dead(int(started.read_text()))


def _dies_once(marker: str) -> str:
    if not Path(marker).exists():
        Path(marker).write_text("died")
        os._exit(1)  # the worker process dies mid-call
    return "survived"


retried = raygent.tool(name="dies_once", idempotent=True, retries=1)(_dies_once)
not_retried = raygent.tool(name="dies_once", retries=1)(_dies_once)


async def test_an_idempotent_tool_is_retried_when_its_worker_dies(tmp_path: Path) -> None:
    result = await run_tool(retried, marker=str(tmp_path / "first"))
    assert result.report.tool_calls[0].output == "survived"


async def test_a_tool_that_is_not_idempotent_fails_typed_when_its_worker_dies(
    tmp_path: Path,
) -> None:
    result = await run_tool(not_retried, marker=str(tmp_path / "first"))
    assert result.ok and result.text == "done"  # the run goes on
    [record] = result.report.tool_calls
    assert record.error and record.error["type"] == ToolExecutionError.__name__
    assert "worker failed" in record.error["message"]
    assert "not retried" in record.error["message"]


@raygent.tool
def waits(started: str, stopped: str) -> str:
    """Runs until cancelled."""
    Path(started).write_text("started")
    try:
        for _ in range(600):
            time.sleep(0.1)
    except KeyboardInterrupt:  # how a cancelled task is told to stop
        Path(stopped).write_text("stopped")
        raise
    return "finished"


async def test_aborting_a_run_cancels_its_tool_task(tmp_path: Path) -> None:
    started, stopped = tmp_path / "started", tmp_path / "stopped"
    controller = AbortController()
    bot = raygent.agent(
        model=calling("waits", {"started": str(started), "stopped": str(stopped)}),
        tools=[waits],
        backend=backend(),
    )
    run = asyncio.ensure_future(bot.execute("go", signal=controller.signal))
    await wait_for_file(started)
    controller.abort("enough")
    result = await run
    assert result.report.status == "cancelled"
    await wait_for_file(stopped)  # it stopped, and had the chance to clean up

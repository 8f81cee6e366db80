"""Tool calls that need placement: each call is one Ray task.

A tool that declares `num_cpus`, `resources` or a `runtime_env` runs as a task asking for
them (no `num_cpus`: the backend's `tool_num_cpus`); an idempotent tool's task is retried
`retries` times if its worker dies (a tool that raises is never retried: it answered).
`timeout` cancels the task.

A signal lives in the caller's process, so the tool's `ToolContext` carries a signal of
the task's own, which fires when the task is cancelled (the run aborted or cancelled, the
tool timed out) just before the tool is interrupted, as the run's signal does in-process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import ray
from ray.exceptions import RayError

from raygent.backend import AbortController, Tool, ToolContext

from .._options import RayOptions
from .outcomes import Failed, portable, timed_out, worker_failed

__all__ = ["ToolTasks", "needs_placement"]

# Keys of `Tool.resources` that Ray takes as their own task options.
_BUILTIN_RESOURCES = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory"}

CANCELLED = "tool task cancelled"  # the reason on the signal a cancelled task's tool sees
INTERRUPT_TICK = 0.05  # seconds: how soon an async tool's task notices its cancellation


def needs_placement(tool: Tool[..., Any]) -> bool:
    """Whether a tool asks for something only a task of its own can give it."""
    return tool.num_cpus is not None or bool(tool.resources) or bool(tool.runtime_env)


def _runner(fn: Callable[..., Any], ctx_param: str | None, name: str) -> Callable[..., Any]:
    """The function a tool's tasks run: call the tool (an async one in its own loop)."""

    def run_tool(kwargs: dict[str, Any], ctx: ToolContext | None) -> Any:
        controller = AbortController()
        if ctx_param is not None and ctx is not None:
            kwargs[ctx_param] = dataclasses.replace(ctx, signal=controller.signal)
        try:
            value = fn(**kwargs)
            if inspect.isawaitable(value):
                value = asyncio.run(_finish(value, controller))
        except KeyboardInterrupt:  # how Ray tells a task it is cancelled
            controller.abort(CANCELLED)
            raise
        except Exception as exc:
            return Failed(portable(exc, name))
        return value

    return run_tool


async def _finish(awaitable: Awaitable[Any], controller: AbortController) -> Any:
    """Await an async tool; when the task is cancelled, fire its signal first, then
    cancel the tool (the order of an abort in-process).

    Ray tells a cancelled task with a KeyboardInterrupt that Python raises only when it
    runs bytecode: a loop idle in its selector would never see it (and its worker would
    be killed after the grace, the tool never cancelled), so the loop wakes every tick."""
    tool = asyncio.ensure_future(awaitable)
    ticker = asyncio.ensure_future(_tick())
    try:
        return await asyncio.shield(tool)
    except asyncio.CancelledError:
        controller.abort(CANCELLED)
        tool.cancel()
        raise
    finally:
        ticker.cancel()


async def _tick() -> None:
    # Waking the loop is the point: nothing here waits for an event.
    while True:  # noqa: ASYNC110
        await asyncio.sleep(INTERRUPT_TICK)


class ToolTasks:
    """Runs tool calls as Ray tasks, one per call."""

    def __init__(self, options: RayOptions) -> None:
        self.options = options
        # One remote function per tool: Ray exports it once and workers cache it, so a
        # call ships only its arguments.
        self._tasks: weakref.WeakKeyDictionary[Tool[..., Any], Any] = weakref.WeakKeyDictionary()

    async def invoke(
        self,
        tool: Tool[..., Any],
        kwargs: dict[str, Any],
        remote_ctx: ToolContext | None,
        ctx: ToolContext,
    ) -> Any:
        ref = self._task(tool).remote(kwargs, remote_ctx)
        try:
            outcome = await self._outcome(ref, tool.timeout)
        except asyncio.TimeoutError:
            raise timed_out(tool) from None
        except RayError as exc:
            raise worker_failed(tool, ctx, exc) from None
        if isinstance(outcome, Failed):
            raise outcome.error
        return outcome

    async def _outcome(self, ref: Any, timeout: float | None) -> Any:
        try:
            return await (ref if timeout is None else asyncio.wait_for(ref, timeout))
        except (asyncio.CancelledError, asyncio.TimeoutError):
            self._stop(ref)
            raise

    def _stop(self, ref: Any) -> None:
        """Stop a task whose answer is no longer wanted (timed out, run aborted or
        cancelled): first a KeyboardInterrupt in the tool, so it can clean up; if it is
        still running `tool_cancel_grace` seconds later (blocked in a sleep, a socket, C
        code, where the interrupt cannot land), its worker process is killed."""
        ray.cancel(ref)
        grace = self.options.tool_cancel_grace
        asyncio.get_running_loop().call_later(grace, _kill_if_running, ref)

    def _task(self, tool: Tool[..., Any]) -> Any:
        task = self._tasks.get(tool)
        if task is None:
            remote = ray.remote(_runner(tool.fn, tool.ctx_param, tool.name))
            task = self._tasks[tool] = remote.options(**self._task_options(tool))
        return task

    def _task_options(self, tool: Tool[..., Any]) -> dict[str, Any]:
        resources = dict(tool.resources or {})
        options: dict[str, Any] = {
            "num_cpus": self.options.tool_num_cpus if tool.num_cpus is None else tool.num_cpus,
            # Retrying re-runs the tool from the start: only when it is safe to.
            "max_retries": tool.retries if tool.idempotent else 0,
            "retry_exceptions": False,
            "name": f"tool:{tool.name}",
        }
        for key, option in _BUILTIN_RESOURCES.items():
            if key in resources:  # Ray refuses these inside `resources`
                options[option] = resources.pop(key)
        if resources:
            options["resources"] = resources
        if tool.runtime_env:
            options["runtime_env"] = tool.runtime_env
        return options


def _kill_if_running(ref: Any) -> None:
    finished, _ = ray.wait([ref], timeout=0, fetch_local=False)
    if not finished:
        ray.cancel(ref, force=True)

"""Tool execution on Ray: each tool call is one remote task.

The task asks for the tool's `num_cpus` (else the backend's default), `resources` and
`runtime_env`; an idempotent tool's task is retried `retries` times if its worker dies
(a tool that raises is never retried: it answered). `timeout` cancels the task. An
`inline` tool runs in the caller's process, as on the local backend.

Arguments are validated in the caller (an invalid call costs no remote task). A signal
lives in the caller's process, so the tool's `ToolContext` carries a signal of the
task's own, which fires when the task is cancelled (the run aborted or cancelled, the
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
import ray.cloudpickle
from ray.exceptions import NodeDiedError, RayError, RayTaskError

from ._core import AbortController, Tool, ToolContext, ToolExecutionError, ToolTimeoutError
from ._options import RayOptions

__all__ = ["RayToolExecution"]

_dumps: Callable[[Any], bytes] = ray.cloudpickle.dumps  # what Ray ships results with

# Keys of `Tool.resources` that Ray takes as their own task options.
_BUILTIN_RESOURCES = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory"}

CANCELLED = "tool task cancelled"  # the reason on the signal a cancelled task's tool sees
INTERRUPT_TICK = 0.05  # seconds: how soon an async tool's task notices its cancellation


class _Failed:
    """A tool's exception, returned as a value: the caller raises it as it is (no
    `RayTaskError` around it, no "error in task" logged for an ordinary tool failure)."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


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
            return _Failed(_portable(exc, name))
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


def _portable(exc: Exception, name: str) -> Exception:
    """`exc` if it can travel back to the caller, else a ToolExecutionError saying what
    it was (the same text the agent loop would have made of it)."""
    try:
        _dumps(exc)
    except Exception:
        return ToolExecutionError(f"tool {name!r} raised {type(exc).__name__}: {exc}", tool=name)
    return exc


class RayToolExecution:
    """`ToolExecution` with one Ray task per tool call."""

    def __init__(self, options: RayOptions | None = None) -> None:
        self.options = options or RayOptions()
        # One remote function per tool: Ray exports it once and workers cache it, so a
        # call ships only its arguments.
        self._tasks: weakref.WeakKeyDictionary[Tool[..., Any], Any] = weakref.WeakKeyDictionary()

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.options,))

    async def invoke(
        self, tool: Tool[..., Any], arguments: dict[str, Any] | None, ctx: ToolContext
    ) -> Any:
        if tool.inline:
            return await tool.invoke(arguments, ctx)
        kwargs = tool.validate(arguments)
        self.options.connect()
        # The signal stays here; the task makes its own (see `_runner`).
        remote_ctx = dataclasses.replace(ctx, signal=None) if tool.ctx_param else None
        ref = self._task(tool).remote(kwargs, remote_ctx)
        try:
            outcome = await self._outcome(ref, tool.timeout)
        except asyncio.TimeoutError:
            raise ToolTimeoutError(
                f"tool {tool.name!r} timed out after {tool.timeout:g}s",
                tool=tool.name,
                timeout=tool.timeout,
            ) from None
        except RayError as exc:
            raise _worker_failed(tool, ctx, exc) from None
        if isinstance(outcome, _Failed):
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
        still running `cancel_grace` seconds later (blocked in a sleep, a socket, C code,
        where the interrupt cannot land), its worker process is killed."""
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


def _worker_failed(tool: Tool[..., Any], ctx: ToolContext, exc: RayError) -> ToolExecutionError:
    """A task that ended without the tool's answer: its worker or node died, it ran out
    of memory, its runtime env could not be set up, its result could not be shipped.

    The message goes to the model: only the first sentence of Ray's text, not the node
    addresses and `ray` commands for operators that follow it (Ray logs those)."""
    cause = exc.cause if isinstance(exc, RayTaskError) else exc
    what = f"{type(cause).__name__}: {_first_sentence(cause)}"
    lost = "its Ray node was lost" if isinstance(cause, NodeDiedError) else "its Ray worker failed"
    if isinstance(exc, RayTaskError):
        message = f"tool {tool.name!r} failed on its Ray worker ({what})"
    elif tool.idempotent and tool.retries:
        message = (
            f"tool {tool.name!r} could not finish: {lost} after {tool.retries} retries ({what})"
        )
    else:
        message = (
            f"tool {tool.name!r} could not finish: {lost} ({what}); "
            "it was not retried (only idempotent tools with retries are)"
        )
    return ToolExecutionError(
        message, tool=tool.name, call_id=ctx.call_id, cause=type(cause).__name__
    )


def _first_sentence(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    end = line.find(". ")
    return line if end < 0 else line[: end + 1]

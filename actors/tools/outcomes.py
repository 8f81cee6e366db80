"""What a remote tool call comes back as, on both Ray paths (tasks and executors).

A tool's value, or its exception as a value (`Failed`, raised as it is by the caller: no
`RayTaskError` around it, no "error in task" logged by Ray for an ordinary tool
failure); and the typed error a call becomes when its Ray worker could not answer.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import ray.cloudpickle
from ray.exceptions import NodeDiedError, RayError, RayTaskError

from raygent.backend import Tool, ToolContext, ToolExecutionError, ToolTimeoutError

__all__ = [
    "CANCELLED",
    "TIMED_OUT",
    "Failed",
    "TimedOut",
    "decode",
    "encode",
    "portable",
    "timed_out",
    "worker_failed",
]

dumps: Callable[[Any], bytes] = ray.cloudpickle.dumps  # what Ray ships values with

CANCELLED = "tool call cancelled"  # the reason on the signal a cancelled call's tool sees
TIMED_OUT = "tool call timed out"  # ... and a timed-out one's


class Failed:
    """A tool's exception, returned as a value: the caller raises it as it is."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class TimedOut:
    """The call was stopped at its timeout (the caller says so with the tool's timeout)."""


def timed_out(tool: Tool[..., Any]) -> ToolTimeoutError:
    seconds = tool.timeout or 0.0
    return ToolTimeoutError(
        f"tool {tool.name!r} timed out after {seconds:g}s", tool=tool.name, timeout=seconds
    )


def portable(exc: Exception, name: str) -> Exception:
    """`exc` if it can travel back to the caller, else a ToolExecutionError saying what
    it was (the same text the agent loop would have made of it)."""
    try:
        dumps(exc)
    except Exception:
        return ToolExecutionError(f"tool {name!r} raised {type(exc).__name__}: {exc}", tool=name)
    return exc


def encode(value: Any, name: str) -> bytes:
    """One call's outcome, pickled on its own: a value that cannot be pickled fails
    only its call, with a typed error, not the whole batch it came back in."""
    if isinstance(value, Failed):
        return dumps(Failed(portable(value.error, name)))
    try:
        # Plain pickle first: several times quicker for plain data, and it refuses what
        # it cannot find by reference here (a class shipped by value), which cloudpickle
        # then takes.
        return pickle.dumps(value, protocol=5)
    except Exception:
        pass
    try:
        return dumps(value)
    except Exception as exc:
        error = ToolExecutionError(
            f"tool {name!r} returned a {type(value).__name__} that cannot be sent back "
            f"({type(exc).__name__}: {exc})",
            tool=name,
        )
        return dumps(Failed(error))


def decode(data: bytes, tool: Tool[..., Any], ctx: ToolContext) -> Any:
    """The value `encode` made (raising the tool's exception, if it raised)."""
    try:
        value = pickle.loads(data)
    except Exception as exc:
        raise ToolExecutionError(
            f"the result of tool {tool.name!r} cannot be read here ({type(exc).__name__}: {exc})",
            tool=tool.name,
            call_id=ctx.call_id,
        ) from None
    if isinstance(value, Failed):
        raise value.error
    if isinstance(value, TimedOut):
        raise timed_out(tool)
    return value


def worker_failed(tool: Tool[..., Any], ctx: ToolContext, exc: RayError) -> ToolExecutionError:
    """A call that ended without the tool's answer: its worker or node died, it ran out
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

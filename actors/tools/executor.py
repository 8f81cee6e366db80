"""The tool executor: one process that runs many tool calls at once, for every caller on
its node.

`ToolExecutor` is a plain class; `tools.executor_pool` makes a pool of them per
node, named async Ray actors. It is usable in-process too, which is how its batching,
timeouts, tool cache and retiring are unit-tested.

- `run(calls, tools)` runs a batch of calls at once and answers each by its key: async
  tools on this loop, sync tools in daemon threads. A tool arrives once, as its pickled
  bytes under a key (their hash): a batch naming a tool this executor does not know
  (first use, or it restarted) is answered `UnknownTools`, nothing run, and the caller
  sends it again with the bytes.
- The `ToolContext` of a call carries a signal of the executor's own, fired when the call
  is cancelled (`cancel`, or the `run` itself cancelled) or times out, just before the
  tool is interrupted: an async tool is cancelled, a sync tool's thread gets an
  asynchronous exception (KeyboardInterrupt on cancel, the timeout error on timeout).
  Each call's `timeout` is enforced here; the call is answered at once.
- A call still running `grace` seconds after its interruption (blocked in C, where no
  exception lands, or ignoring its cancellation) makes the executor retire: it answers
  every new batch `Retiring` (nothing run: the caller sends it to another executor of
  the node), lets its other calls finish, then exits its process, which ends the stuck
  tool. The next caller creates the executor again by name.
- After `idle_timeout` seconds without a call it exits the same way: it outlives the
  process that created it, but does not linger.
- Outcomes go back pickled one by one (`outcomes.encode`): values, the tool's
  exception as a value, typed errors. Nothing is raised for an ordinary tool failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import functools
import inspect
import os
import pickle
import queue
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

import ray

from raygent.backend import (
    AbortController,
    ToolContext,
    ToolExecutionError,
    ToolTimeoutError,
    redacting_logger,
)

from .outcomes import CANCELLED, TIMED_OUT, Failed, TimedOut, encode

__all__ = [
    "Answer",
    "Retiring",
    "ToolCallSpec",
    "ToolExecutor",
    "ToolTimedOut",
    "UnknownTools",
    "leave_process",
]

log = redacting_logger("raygent.tools")

THREADS = 256  # sync tools running at once per executor (threads start on demand)
MAX_TOOLS = 4096  # tools kept per executor (least recently used go first)
MAX_TOMBSTONES = 10_000  # calls cancelled before they arrived, remembered
QUIET = 0.2  # seconds between the last answer of a leaving executor and its exit
EXIT_FALLBACK = 10.0  # seconds after which a leaving process ends, whatever holds it


class ToolCallSpec(NamedTuple):
    """One call as it travels to an executor."""

    key: str  # unique per call attempt: the answer comes back under it
    tool: str  # the tool's key (a hash of its pickled bytes)
    kwargs: dict[str, Any]  # validated by the caller
    ctx: ToolContext | None  # without the caller's signal; None if the tool takes none
    timeout: float | None
    grace: float  # seconds an interrupted tool has to stop before the executor retires


@dataclasses.dataclass(frozen=True)
class Retiring:
    """The executor takes no new calls (a tool of it is stuck): nothing was run."""

    incarnation: str


@dataclasses.dataclass(frozen=True)
class UnknownTools:
    """The executor does not know these tools: nothing was run; send them along."""

    keys: tuple[str, ...]
    incarnation: str


Answer = dict[str, bytes] | Retiring | UnknownTools


class ToolTimedOut(ToolTimeoutError):
    """Raised in a sync tool's thread when its call times out (an asynchronous exception
    is made from the class alone, hence the default message)."""

    def __init__(self, message: str = "the tool call timed out", **details: Any) -> None:
        super().__init__(message, **details)


@dataclasses.dataclass(frozen=True)
class _Loaded:
    fn: Callable[..., Any]
    ctx_param: str | None
    name: str
    is_async: bool


_CANCELLED_ANSWER = encode(Failed(ToolExecutionError(CANCELLED)), "")  # nobody reads it
_TIMED_OUT_ANSWER = encode(TimedOut(), "")


class ToolExecutor:
    """Runs the tool calls sent to it, many at once (see the module docstring).

    `leave` ends this executor's process (in-process: whatever the test passes)."""

    def __init__(
        self,
        idle_timeout: float = 600.0,
        threads: int = THREADS,
        leave: Callable[[], None] | None = None,
    ) -> None:
        self._incarnation = uuid.uuid4().hex[:12]
        self._tools: OrderedDict[str, _Loaded | str] = OrderedDict()  # str: why unloadable
        self._running: dict[str, _Running] = {}
        self._tombstones: OrderedDict[str, None] = OrderedDict()
        self._threads = _Threads(threads)
        self._idle_timeout = idle_timeout
        self._leave = leave or leave_process
        self._loop: asyncio.AbstractEventLoop | None = None
        self._active = 0  # batches being run
        self._last = time.monotonic()
        self._retiring = False
        self._leaving: asyncio.TimerHandle | None = None
        self._left = False
        self._counts = dict.fromkeys(
            ("batches", "calls", "largest_batch", "timed_out", "cancelled", "stuck"), 0
        )
        threading.Thread(target=self._watch, name="raygent-tools-idle", daemon=True).start()

    async def run(self, calls: list[ToolCallSpec], tools: dict[str, bytes] | None = None) -> Answer:
        """Run `calls` at once; each outcome (pickled) under its call's key."""
        self._touch()
        if self._retiring:
            return Retiring(self._incarnation)
        self._load(tools or {})
        loaded = [self._tools.get(call.tool) for call in calls]
        unknown = sorted({call.tool for call in calls if call.tool not in self._tools})
        if unknown:
            return UnknownTools(tuple(unknown), self._incarnation)
        for call in calls:
            self._tools.move_to_end(call.tool)
        counts = self._counts
        counts["batches"] += 1
        counts["calls"] += len(calls)
        counts["largest_batch"] = max(counts["largest_batch"], len(calls))
        self._active += 1
        try:
            if len(calls) == 1:  # the common case, without gather's machinery
                outcomes: list[bytes | BaseException] = [await self._one(calls[0], loaded[0])]
            else:
                outcomes = await asyncio.gather(
                    *(self._one(call, found) for call, found in zip(calls, loaded, strict=True)),
                    return_exceptions=True,
                )
        finally:
            self._active -= 1
            self._touch()
            self._maybe_leave()
        return {
            call.key: out if isinstance(out, bytes) else _internal_error(out)
            for call, out in zip(calls, outcomes, strict=True)
        }

    async def cancel(self, keys: list[str]) -> None:
        """Cancel these calls (some of a batch whose other callers still wait). A key
        not running here yet is remembered: Ray may deliver this before the batch."""
        for key in keys:
            running = self._running.get(key)
            if running is not None:
                running.task.cancel()
                continue
            self._tombstones[key] = None
            while len(self._tombstones) > MAX_TOMBSTONES:
                self._tombstones.popitem(last=False)

    async def stats(self) -> dict[str, Any]:
        """What this executor has done and holds (a call to it is no activity)."""
        return {
            "pid": os.getpid(),
            "incarnation": self._incarnation,
            **self._counts,
            "running": len(self._running),
            "threads": self._threads.started,
            "tools": len(self._tools),
            "retiring": self._retiring,
        }

    async def _one(self, call: ToolCallSpec, loaded: _Loaded | str | None) -> bytes:
        if not isinstance(loaded, _Loaded):
            return encode(Failed(ToolExecutionError(loaded or "unknown tool")), "")
        if call.key in self._tombstones:
            del self._tombstones[call.key]
            self._counts["cancelled"] += 1
            return _CANCELLED_ANSWER
        task = asyncio.current_task()
        assert task is not None
        running = self._running[call.key] = _Running(task)
        try:
            work = self._start(loaded, call, running)
            return await self._finish(work, loaded.name, call, running)
        finally:
            del self._running[call.key]

    def _start(self, loaded: _Loaded, call: ToolCallSpec, running: _Running) -> asyncio.Future[Any]:
        kwargs = dict(call.kwargs)
        if loaded.ctx_param is not None and call.ctx is not None:
            signal = running.controller.signal
            kwargs[loaded.ctx_param] = dataclasses.replace(call.ctx, signal=signal)
        if loaded.is_async:
            return asyncio.ensure_future(_awaited(loaded.fn, kwargs))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._threads.submit(functools.partial(running.call, loaded.fn, kwargs, loop, future))
        return future

    async def _finish(
        self, work: asyncio.Future[Any], name: str, call: ToolCallSpec, running: _Running
    ) -> bytes:
        try:
            if isinstance(work, asyncio.Task):
                # Not awaited directly: a cancellation must reach the signal first.
                done, _ = await asyncio.wait({work}, timeout=call.timeout)
                if not done:
                    raise asyncio.TimeoutError
                return _task_outcome(work, name)
            # A sync tool's own future (cancelling it does not touch its thread).
            ok, value = await asyncio.wait_for(work, call.timeout)
            return _outcome(ok, value, name)
        except asyncio.CancelledError:
            self._counts["cancelled"] += 1
            self._interrupt(name, running, work, KeyboardInterrupt, CANCELLED, call.grace)
            return _CANCELLED_ANSWER  # the batch goes on; this call's caller has gone
        except asyncio.TimeoutError:
            self._counts["timed_out"] += 1
            self._interrupt(name, running, work, ToolTimedOut, TIMED_OUT, call.grace)
            return _TIMED_OUT_ANSWER

    def _interrupt(
        self,
        name: str,
        running: _Running,
        work: asyncio.Future[Any],
        error: type[BaseException],
        reason: str,
        grace: float,
    ) -> None:
        """The signal first, then the interrupt (the order of an abort in-process); a
        tool still running `grace` seconds later makes the executor retire."""
        running.controller.abort(reason)
        if isinstance(work, asyncio.Task):
            work.cancel()
        else:
            running.stop(error)
        asyncio.get_running_loop().call_later(grace, self._check_stopped, name, running, work)

    def _check_stopped(self, name: str, running: _Running, work: asyncio.Future[Any]) -> None:
        stopped = work.done() if isinstance(work, asyncio.Task) else running.finished
        if stopped or self._retiring:
            return
        log.warning(
            "tool %r is still running after its cancellation or timeout; its executor "
            "(pid %d) retires: it takes no new calls and exits once its other calls end",
            name,
            os.getpid(),
        )
        self._counts["stuck"] += 1
        self._retiring = True
        self._maybe_leave()

    def _maybe_leave(self) -> None:
        if self._retiring and not self._active and self._leaving is None and not self._left:
            loop = asyncio.get_running_loop()
            # A moment for Ray to send the last answers before the process goes.
            self._leaving = loop.call_later(QUIET, self._go)

    def _go(self) -> None:
        self._leaving = None
        if self._active or self._left:
            return
        self._left = True
        self._leave()

    def _touch(self) -> None:
        self._last = time.monotonic()
        self._loop = asyncio.get_running_loop()

    def _watch(self) -> None:
        """The idle timer, a daemon thread: it also runs for an executor never called
        (its creator died first), which has no loop to time it."""
        every = min(self._idle_timeout / 4, 30.0)
        while not self._left:
            time.sleep(every)
            if self._active or time.monotonic() - self._last < self._idle_timeout:
                continue
            loop = self._loop
            if loop is None:
                self._left = True
                self._leave()
                return
            with contextlib.suppress(RuntimeError):  # the loop is closed: in-process only
                loop.call_soon_threadsafe(self._idle)

    def _idle(self) -> None:
        if not self._active and time.monotonic() - self._last >= self._idle_timeout:
            self._retiring = True  # a batch that arrives now is refused, never run
            self._maybe_leave()

    def _load(self, tools: dict[str, bytes]) -> None:
        for key, data in tools.items():
            if key in self._tools:
                continue
            try:
                fn, ctx_param, name, is_async = pickle.loads(data)
                self._tools[key] = _Loaded(fn, ctx_param, name, is_async)
            except Exception as exc:
                self._tools[key] = (
                    f"the tool cannot be loaded on its tool executor ({type(exc).__name__}: {exc})"
                )
        while len(self._tools) > MAX_TOOLS:
            self._tools.popitem(last=False)


class _Running:
    """One call in progress: its signal, its task here and, for a sync tool, the thread
    running it. The lock makes "interrupt the thread" and "the tool has returned"
    exclusive: an asynchronous exception never lands outside the tool's own call."""

    __slots__ = ("controller", "finished", "lock", "stopped", "task", "thread")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.controller = AbortController()
        self.task = task
        self.lock = threading.Lock()
        self.thread: int | None = None
        self.stopped = False  # interrupted: a thread that has not started it skips it
        self.finished = False  # its thread is done with it

    def stop(self, error: type[BaseException]) -> None:
        """Interrupt the sync tool: an exception in its thread (or no start at all)."""
        with self.lock:
            self.stopped = True
            if self.thread is not None:
                _set_async_exc(self.thread, error)

    def call(
        self,
        fn: Callable[..., Any],
        kwargs: dict[str, Any],
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
    ) -> None:
        """Run the sync tool (in a worker thread) and settle `future` with (ok, value)."""
        outcome: tuple[bool, Any] | None = None
        try:
            try:
                if self._enter():
                    outcome = (True, fn(**kwargs))
                else:
                    outcome = (False, ToolExecutionError(CANCELLED))
            except BaseException as exc:
                outcome = (False, exc)
            finally:
                self._leave()
        except BaseException as exc:  # the interrupt landed in `_leave`: it is spent now
            self._leave()
            outcome = outcome or (False, exc)
        self.finished = True
        loop.call_soon_threadsafe(_settle, future, outcome)

    def _enter(self) -> bool:
        with self.lock:
            if self.stopped:
                return False
            self.thread = threading.get_ident()
            return True

    def _leave(self) -> None:
        with self.lock:
            if self.thread is not None:
                _set_async_exc(self.thread, None)  # drop an interrupt not yet raised
                self.thread = None


class _Threads:
    """Daemon threads for sync tools, started on demand up to `limit`, then reused.
    Daemons: a thread stuck in a tool never holds up the process's exit (retiring
    relies on that)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.started = 0
        self._idle = 0

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
            elif self.started < self._limit:
                self.started += 1
                name = f"raygent-tool-{self.started}"
                threading.Thread(target=self._serve, name=name, daemon=True).start()
        self._jobs.put(job)

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            with contextlib.suppress(BaseException):  # a job settles its own outcome
                job()
            with self._lock:
                self._idle += 1


def _set_async_exc(thread: int, error: type[BaseException] | None) -> None:
    """Raise `error` in `thread` when it next runs Python code (None: drop a pending one)."""
    exc = None if error is None else ctypes.py_object(error)
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), exc)


def _settle(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if not future.done():
        future.set_result(outcome)


async def _awaited(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    value = fn(**kwargs)
    return await value if inspect.isawaitable(value) else value


def _task_outcome(work: asyncio.Task[Any], name: str) -> bytes:
    if work.cancelled():
        return _outcome(False, asyncio.CancelledError(), name)
    exc = work.exception()
    return _outcome(True, work.result(), name) if exc is None else _outcome(False, exc, name)


def _outcome(ok: bool, value: Any, name: str) -> bytes:
    """A finished call's answer: its value, or its exception as a value."""
    if ok:
        return encode(value, name)
    if not isinstance(value, Exception):  # KeyboardInterrupt, SystemExit, a cancellation
        value = ToolExecutionError(
            f"tool {name!r} raised {type(value).__name__}: {value}", tool=name
        )
    return encode(Failed(value), name)


def _internal_error(exc: BaseException) -> bytes:
    error = ToolExecutionError(f"the tool executor failed: {type(exc).__name__}: {exc}")
    return encode(Failed(error), "")


def leave_process() -> None:
    """End this executor's process on purpose (`ray.actor.exit_actor`): Ray does not
    restart it and frees its name; a call that reaches it meanwhile fails with an
    intended-exit `ActorDiedError`, which callers know was never run. Should the exit
    not happen, the process ends anyway `EXIT_FALLBACK` seconds later."""
    fallback = threading.Timer(EXIT_FALLBACK, os._exit, (0,))
    fallback.daemon = True
    fallback.start()
    with contextlib.suppress(BaseException):  # in an async actor it raises to end the task
        ray.actor.exit_actor()  # type: ignore[no-untyped-call]

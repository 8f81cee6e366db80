"""Abort signals: cancel a run, or one model request, from anywhere (any thread)."""

from __future__ import annotations

import asyncio
import inspect
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .errors import AbortedError

__all__ = ["AbortController", "AbortSignal", "AbortWatch", "abortable"]

T = TypeVar("T")


class AbortSignal:
    """Fires once. Callbacks run in the thread that calls `abort()`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._aborted = False
        self._reason: str | None = None
        self._callbacks: list[Callable[[], None]] = []

    @property
    def aborted(self) -> bool:
        return self._aborted

    @property
    def reason(self) -> str | None:
        return self._reason

    def raise_if_aborted(self) -> None:
        if self._aborted:
            raise AbortedError(f"aborted: {self._reason or 'no reason given'}", reason=self._reason)

    def add_callback(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` on abort (at once if already aborted); returns a remover."""
        with self._lock:
            if not self._aborted:
                self._callbacks.append(callback)
                return _Remover(self, callback)
        callback()
        return _Remover(None, None)

    def _remove(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    def _fire(self, reason: str | None) -> None:
        with self._lock:
            if self._aborted:
                return
            self._aborted, self._reason = True, reason
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    async def wait(self) -> None:
        """Return once the signal has fired."""
        if self._aborted:
            return
        loop = asyncio.get_running_loop()
        fired = loop.create_future()

        def settle() -> None:
            if not fired.done():
                fired.set_result(None)

        def wake() -> None:
            loop.call_soon_threadsafe(settle)

        remove = self.add_callback(wake)
        try:
            await fired
        finally:
            remove()

    def __repr__(self) -> str:
        return f"AbortSignal(aborted={self._aborted}, reason={self._reason!r})"


class _Remover:
    """Removes a callback once, then forgets both: a run that keeps its remover (and
    whose callback refers back to the run) is then no reference cycle for the GC."""

    __slots__ = ("_callback", "_signal")

    def __init__(self, signal: AbortSignal | None, callback: Callable[[], None] | None) -> None:
        self._signal, self._callback = signal, callback

    def __call__(self) -> None:
        signal, callback = self._signal, self._callback
        self._signal = self._callback = None
        if signal is not None and callback is not None:
            signal._remove(callback)


class AbortController:
    """Owns a signal; `abort(reason)` fires it. Safe to call from any thread."""

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: str | None = None) -> None:
        self.signal._fire(reason)


class AbortWatch:
    """Makes awaits abortable with one callback registration for many awaits (a stream's
    chunks): `with AbortWatch(signal) as watch: await watch.until(next_chunk())`.

    If the signal fires while an `until` is waiting, the await is cancelled (closing
    whatever it holds, e.g. an HTTP request) and AbortedError is raised in its place.
    """

    __slots__ = ("_cancelled", "_loop", "_remove", "_signal", "_task")

    def __init__(self, signal: AbortSignal | None) -> None:
        self._signal = signal
        self._task: asyncio.Task[Any] | None = None
        self._cancelled = False
        self._remove: Callable[[], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __enter__(self) -> AbortWatch:
        if self._signal is not None:
            self._loop = asyncio.get_running_loop()
            self._remove = self._signal.add_callback(self._on_abort)
        return self

    def __exit__(self, *exc: object) -> None:
        self._task = None
        if self._remove is not None:
            remove, self._remove = self._remove, None
            remove()

    def _on_abort(self) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._cancel_waiting)

    def _cancel_waiting(self) -> None:
        if self._task is not None:
            self._cancelled = True
            self._task.cancel()

    async def until(self, awaitable: Awaitable[T]) -> T:
        signal = self._signal
        if signal is None:
            return await awaitable
        if signal.aborted:
            # Never started: close it, or it is left un-awaited (a warning at its GC).
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            signal.raise_if_aborted()
        self._task = asyncio.current_task()
        try:
            return await awaitable
        except asyncio.CancelledError:
            if not self._cancelled:
                raise
            self._cancelled = False
            if sys.version_info >= (3, 11) and self._task is not None:
                self._task.uncancel()
            raise AbortedError(
                f"aborted: {signal.reason or 'no reason given'}", reason=signal.reason
            ) from None
        finally:
            self._task = None


async def abortable(awaitable: Awaitable[T], signal: AbortSignal | None) -> T:
    """Await `awaitable` in the current task; if `signal` fires meanwhile, cancel the await
    (closing whatever it holds, e.g. an HTTP request) and raise AbortedError."""
    if signal is None:
        return await awaitable
    with AbortWatch(signal) as watch:
        return await watch.until(awaitable)

"""The `*_sync` entry points: run a coroutine to its end from synchronous code, whether
or not the calling thread is running an event loop.

No loop in the calling thread (a script): `asyncio.run` here, as always. A loop running
(Jupyter, IPython, an async handler calling sync code): the coroutine runs under
`asyncio.run` on a helper thread of its own, and the caller blocks until it ends. No
loop is patched (no `nest_asyncio`).

Either way the coroutine is made in the loop that runs it (never left un-awaited), and
it gets a loop of its own that `asyncio.run` closes: what is bound to that loop (HTTP
pools, Redis pools) is opened and closed on it (they close at `shutdown_asyncgens`).

Ctrl-C while a helper thread runs the call reaches the caller's thread as
KeyboardInterrupt; it is handed to the helper loop: to the handler the coroutine set
with `on_interrupt` (batch: abort the batch, then cancel it), else the task is cancelled
(what `asyncio.run` does). Either way the caller waits for the coroutine to end, so no
work goes on in the background; ended cancelled, the call raises KeyboardInterrupt.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import signal
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["on_interrupt", "run_sync"]

_T = TypeVar("_T")
_POLL = 0.1  # seconds: how often the waiting caller runs bytecode (to see Ctrl-C)
_here = threading.local()  # `.helper`: the _Helper whose loop this thread runs


def run_sync(main: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run `main()` to its end in a loop of its own and return (or raise) its outcome."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    return _Helper(main).run()


@contextlib.contextmanager
def on_interrupt(handler: Callable[[], None]) -> Iterator[None]:
    """While the block runs, Ctrl-C calls `handler` (in the running loop) instead of
    cancelling: through a SIGINT handler on the loop in the main thread, through the
    waiting caller on a `run_sync` helper thread. Elsewhere Ctrl-C stays as it is."""
    loop = asyncio.get_running_loop()
    helper: _Helper[Any] | None = getattr(_here, "helper", None)
    if helper is not None and helper.loop is loop:
        previous_handler, helper.handler = helper.handler, handler
        try:
            yield
        finally:
            helper.handler = previous_handler
        return
    previous = signal.getsignal(signal.SIGINT)
    handled = _handle_sigint(loop, handler)
    try:
        yield
    finally:
        if handled:
            loop.remove_signal_handler(signal.SIGINT)
            if previous is not None:  # whatever handled Ctrl-C before us
                signal.signal(signal.SIGINT, previous)


def _handle_sigint(loop: asyncio.AbstractEventLoop, handler: Callable[[], None]) -> bool:
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        loop.add_signal_handler(signal.SIGINT, handler)
    except (NotImplementedError, RuntimeError, ValueError):
        return False  # no signal handlers on this loop (Windows): Ctrl-C stays abrupt
    return True


class _Helper(Generic[_T]):
    """One call on a helper thread: its loop, its task, the interrupts it was sent."""

    def __init__(self, main: Callable[[], Coroutine[Any, Any, _T]]) -> None:
        self._main = main
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._outcome: tuple[bool, Any] = (False, None)
        self._interrupted = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[_T] | None = None
        self.handler: Callable[[], None] | None = None

    def run(self) -> _T:
        context = contextvars.copy_context()  # the caller's, as asyncio.run would take
        thread = threading.Thread(
            target=context.run, args=(self._thread,), name="raygent-sync", daemon=True
        )
        thread.start()
        interrupted = False
        while True:
            try:
                while not self._ended.wait(_POLL):
                    pass
                break
            except KeyboardInterrupt:
                interrupted = True
                self._interrupt()
        thread.join()
        ok, value = self._outcome
        if ok:
            return value  # type: ignore[no-any-return]
        if interrupted and isinstance(value, asyncio.CancelledError):
            raise KeyboardInterrupt from None
        raise value

    def _thread(self) -> None:
        try:
            self._outcome = (True, asyncio.run(self._start()))
        except BaseException as exc:  # handed to the caller's thread
            self._outcome = (False, exc)
        finally:
            self._ended.set()

    async def _start(self) -> _T:
        with self._lock:
            self.loop = asyncio.get_running_loop()
            self.task = asyncio.current_task()
            interrupted = self._interrupted
        if interrupted:  # Ctrl-C came before the loop ran: nothing is started
            raise asyncio.CancelledError
        _here.helper = self
        try:
            return await self._main()
        finally:
            _here.helper = None

    def _interrupt(self) -> None:
        """In the caller's thread: hand a Ctrl-C to the helper loop."""
        with self._lock:
            self._interrupted = True
            loop = self.loop
        if loop is None:
            return  # `_start` sees the flag
        with contextlib.suppress(RuntimeError):  # the loop has closed: the call ended
            loop.call_soon_threadsafe(self._interrupt_in_loop)

    def _interrupt_in_loop(self) -> None:
        if self.handler is not None:
            self.handler()
        elif self.task is not None:
            self.task.cancel()

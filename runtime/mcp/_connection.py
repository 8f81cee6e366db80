"""One MCP session on one event loop, owned by a task of its own.

The SDK's transports and session are anyio context managers, entered and left in one
task: the owner task holds them open until `close()` (or its loop ends and cancels it,
which stops a stdio server's process). Calls go through the session from any task.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from mcp import ClientSession
from mcp.client.session import IncomingMessage
from mcp.types import ToolListChangedNotification

from ..errors import MCPServerError

__all__ = ["Connection", "Peer", "Transport", "innermost"]

_log = logging.getLogger("raygent.mcp")


class Peer(Protocol):
    """What a transport knows of its server beyond the streams, for the errors."""

    def explain(self, error: BaseException) -> tuple[str | None, bool]:
        """Why the start failed (None: the error says it) and whether it is transient."""
        ...

    def note(self) -> str:
        """How the server ended ('it exited with code 3 ...'), or ''."""
        ...

    def kill(self) -> None:
        """Stop the server now, from any thread and with no loop (a process: SIGTERM)."""
        ...


# A transport: a factory of (the SDK-style client context manager yielding (read, write,
# ...), the peer it reports to).
Transport = Callable[[], tuple[AbstractAsyncContextManager[Any], Peer]]


class Connection:
    """Started on creation; `session()` waits (bounded) until it is initialised."""

    def __init__(self, transport: Transport, server: str, on_list_changed: Callable[[], None]):
        self.server = server
        # Held weakly: a running connection must not keep its toolset alive (a dropped
        # toolset's finalizer is what stops the server).
        self._on_list_changed = _weak_callable(on_list_changed)
        loop = self._loop = asyncio.get_running_loop()
        self._ready: asyncio.Future[ClientSession] = loop.create_future()
        # A start that failed with no call waiting must not be reported as unretrieved.
        self._ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._stop = asyncio.Event()
        self._read: Any = None
        self._client, self.peer = transport()
        self.task = asyncio.ensure_future(self._own(self._client))

    @property
    def alive(self) -> bool:
        """False once closed, or once the server ended the stream (a stdio server that
        died while idle): the next call then starts a new server instead of failing."""
        if self.task.done() or self._stop.is_set():
            return False
        if self._read is not None and _ended(self._read):
            self.close()
            return False
        return True

    async def session(self, timeout: float) -> ClientSession:
        try:
            return await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except asyncio.TimeoutError:
            self.close()
            raise MCPServerError(  # a slow start (a loaded machine): worth another try
                f"MCP server {self.server} did not start within {timeout:g}s",
                server=self.server,
                retryable=True,
            ) from None

    def close(self) -> None:
        """Leave the session and the transport (stops a stdio server)."""
        self._stop.set()

    async def aclose(self) -> None:
        self.close()
        await asyncio.gather(self.task, return_exceptions=True)

    async def ended(self, within: float = 5.0) -> str:
        """Close, wait (bounded) until the transport is left, and say how the server
        ended ('' when the transport cannot tell)."""
        self.close()
        await asyncio.wait([self.task], timeout=within)
        return self.peer.note()

    def stop_from_anywhere(self) -> None:
        """Stop from any thread, with or without a running loop (a finalizer): through
        the loop when it runs (the graceful shutdown), else the server is killed."""
        loop = self._loop
        try:
            if _running_loop() is loop:
                self.close()
                return
            if loop.is_running():
                loop.call_soon_threadsafe(self.close)
                return
        except RuntimeError:  # the loop closed in between
            pass
        self.peer.kill()

    async def _own(self, client: AbstractAsyncContextManager[Any]) -> None:
        try:
            async with client as streams:
                read, write = streams[0], streams[1]
                self._read = read
                async with ClientSession(read, write, message_handler=self._message) as session:
                    await session.initialize()
                    self._ready.set_result(session)
                    await self._stop.wait()
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(self._start_error(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise
            if not isinstance(exc, Exception):
                raise
        finally:
            self._stop.set()

    def _start_error(self, exc: BaseException) -> MCPServerError:
        inner = innermost(exc)
        why, retryable = self.peer.explain(inner)
        return MCPServerError(
            f"MCP server {self.server} could not be started: "
            f"{why or f'{type(inner).__name__}: {inner}'}",
            server=self.server,
            retryable=retryable,
        )

    async def _message(self, message: IncomingMessage) -> None:
        if isinstance(message, ToolListChangedNotification):
            self._on_list_changed()
        elif isinstance(message, Exception):
            _log.warning("MCP server %s: %s", self.server, message)


def innermost(exc: BaseException) -> BaseException:
    """The error that matters (a refused connection, a process that exited), which the
    SDK's task groups wrap in exception groups: the first one inside."""
    inner = getattr(exc, "exceptions", None)  # an exception group (3.11, or backported)
    while isinstance(inner, tuple) and inner:
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    return exc


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _weak_callable(fn: Callable[[], None]) -> Callable[[], None]:
    if not hasattr(fn, "__self__"):
        return fn
    method = weakref.WeakMethod(fn)

    def call() -> None:
        bound = method()
        if bound is not None:
            bound()

    return call


def _ended(read: Any) -> bool:
    # The transport closes its end of the read stream (anyio's memory stream) when the
    # server's output ends: the server died or hung up.
    statistics = getattr(read, "statistics", None)
    return statistics is not None and statistics().open_send_streams == 0

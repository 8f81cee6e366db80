"""One MCP session on one event loop, owned by a task of its own.

The SDK's transports and session are anyio context managers, entered and left in one
task: the owner task holds them open until `close()` (or its loop ends and cancels it,
which stops a stdio server's process). Calls go through the session from any task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from mcp import ClientSession
from mcp.client.session import IncomingMessage
from mcp.types import ToolListChangedNotification

from ..errors import MCPServerError

__all__ = ["Connection", "Transport"]

_log = logging.getLogger("raygent.mcp")

# A transport: a factory of the SDK's client context managers yielding (read, write).
Transport = Callable[[], AbstractAsyncContextManager[Any]]


class Connection:
    """Started on creation; `session()` waits (bounded) until it is initialised."""

    def __init__(self, transport: Transport, server: str, on_list_changed: Callable[[], None]):
        self.server = server
        self._on_list_changed = on_list_changed
        loop = asyncio.get_running_loop()
        self._ready: asyncio.Future[ClientSession] = loop.create_future()
        # A start that failed with no call waiting must not be reported as unretrieved.
        self._ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._stop = asyncio.Event()
        self._read: Any = None
        self.task = asyncio.ensure_future(self._own(transport))

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
            raise MCPServerError(
                f"MCP server {self.server} did not start within {timeout:g}s", server=self.server
            ) from None

    def close(self) -> None:
        """Leave the session and the transport (stops a stdio server)."""
        self._stop.set()

    async def aclose(self) -> None:
        self.close()
        await asyncio.gather(self.task, return_exceptions=True)

    async def _own(self, transport: Transport) -> None:
        try:
            async with transport() as streams:
                read, write = streams[0], streams[1]
                self._read = read
                async with ClientSession(read, write, message_handler=self._message) as session:
                    await session.initialize()
                    self._ready.set_result(session)
                    await self._stop.wait()
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(
                    MCPServerError(
                        f"MCP server {self.server} could not be started: {_cause(exc)}",
                        server=self.server,
                    )
                )
            if isinstance(exc, asyncio.CancelledError):
                raise
            if not isinstance(exc, Exception):
                raise
        finally:
            self._stop.set()

    async def _message(self, message: IncomingMessage) -> None:
        if isinstance(message, ToolListChangedNotification):
            self._on_list_changed()
        elif isinstance(message, Exception):
            _log.warning("MCP server %s: %s", self.server, message)


def _cause(exc: BaseException) -> str:
    # The SDK's task groups wrap the error that matters (a refused connection, a process
    # that exited) in exception groups: name the first one inside.
    inner = getattr(exc, "exceptions", None)  # an exception group (3.11, or backported)
    while isinstance(inner, tuple) and inner:
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    return f"{type(exc).__name__}: {exc}"


def _ended(read: Any) -> bool:
    # The transport closes its end of the read stream (anyio's memory stream) when the
    # server's output ends: the server died or hung up.
    statistics = getattr(read, "statistics", None)
    return statistics is not None and statistics().open_send_streams == 0

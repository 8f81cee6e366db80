"""`MCPToolset`: an MCP server's tools, one connection per event loop, listed once."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import CONNECTION_CLOSED, INVALID_REQUEST

from ..abort import abortable
from ..errors import MCPServerError, ToolExecutionError
from ..tools import Tool, ToolContext, ToolTimeoutError
from ..toolsets import Toolset, connected
from ._connection import Connection, Transport
from ._stdio import Stderr, StdioPeer, stdio_client
from ._tools import MCPTool, make_tool, result_value

__all__ = ["MCPToolset", "http", "stdio"]


class MCPToolset(Toolset):
    """The tools of one MCP server. Build with `raygent.mcp.stdio` or `raygent.mcp.http`.

    Travels by configuration (pickled without its connections): each process, and each
    event loop in it, opens its own connection on first use.
    """

    def __init__(
        self,
        *,
        server: str,
        transport: Transport,
        prefix: str | None,
        include: Iterable[str] | None,
        exclude: Iterable[str] | None,
        timeout: float,
        approval: bool | Callable[..., Any],
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, not {timeout}")
        self.server = server
        self.prefix = prefix
        self.include = None if include is None else frozenset(include)
        self.exclude = frozenset(exclude or ())
        self.timeout = timeout
        self.approval = approval
        self._transport = transport
        self._start()

    def _start(self) -> None:
        self._live: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Live] = (
            weakref.WeakKeyDictionary()
        )
        # Every connection this toolset opened, on any loop: a toolset dropped without
        # `aclose()` stops them (its servers) when it is collected, on whatever thread.
        self._connections: weakref.WeakSet[Connection] = weakref.WeakSet()
        weakref.finalize(self, _stop_all, self._connections)

    def __repr__(self) -> str:
        return f"MCPToolset({self.server})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_live"], state["_connections"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._start()

    @property
    def connected(self) -> bool:
        """Whether this event loop holds a live connection to the server."""
        live = self._live.get(asyncio.get_running_loop())
        return live is not None and live.connection is not None and live.connection.alive

    async def tools(self) -> Sequence[Tool[..., Any]]:
        """The server's tools (filtered, prefixed), listed once per connection."""
        live = self._here()
        if live.tools is None or live.stale:
            live.stale = False
            listing = await self._list(live)
            live.tools = tuple(
                make_tool(t, self.prefix, self.approval, self._call)
                for t in listing
                if self._wanted(t.name)
            )
        return live.tools

    async def refresh(self) -> Sequence[Tool[..., Any]]:
        """List the server's tools again (for runs that start from now on)."""
        self._here().stale = True
        return await self.tools()

    async def aclose(self) -> None:
        """Close this event loop's connection (a stdio server stops); the next use
        opens a new one."""
        live = self._live.pop(asyncio.get_running_loop(), None)
        if live is not None and live.connection is not None:
            await live.connection.aclose()

    # -- internals -----------------------------------------------------------------------

    def _wanted(self, name: str) -> bool:
        if self.include is not None and name not in self.include:
            return False
        return name not in self.exclude

    def _here(self) -> _Live:
        loop = asyncio.get_running_loop()
        live = self._live.get(loop)
        if live is None:
            live = self._live[loop] = _Live()
        return live

    def _connection(self, live: _Live) -> Connection:
        if live.connection is None or not live.connection.alive:
            # Created before any await: concurrent first calls share one server.
            live.connection = Connection(self._transport, self.server, live.mark_stale)
            self._connections.add(live.connection)
            connected(self)  # a job that owns this context closes it when it ends
        return live.connection

    def _renew(self, live: _Live, lost: Connection) -> Connection:
        """A new session in place of one the server no longer knows (it restarted)."""
        lost.close()
        return self._connection(live)

    async def _list(self, live: _Live) -> list[Any]:
        connection = self._connection(live)
        try:
            try:
                return await self._list_on(connection)
            except MCPError as exc:
                if not _session_lost(exc):
                    raise
            # The server restarted: nothing was done, list on a new session.
            connection = self._renew(live, connection)
            return await self._list_on(connection)
        except asyncio.TimeoutError:
            connection.close()
            raise MCPServerError(
                f"MCP server {self.server} did not list its tools within {self.timeout:g}s",
                server=self.server,
            ) from None
        except MCPError as exc:
            connection.close()
            raise MCPServerError(
                f"MCP server {self.server} could not list its tools: {exc.error.message}",
                server=self.server,
            ) from None

    async def _list_on(self, connection: Connection) -> list[Any]:
        session = await connection.session(self.timeout)
        found: list[Any] = []
        cursor: str | None = None
        while True:
            page = await asyncio.wait_for(session.list_tools(params=_page(cursor)), self.timeout)
            found.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return found

    async def _call(self, name: str, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        return await abortable(self._call_within(name, arguments, ctx.tool_name), ctx.signal)

    async def _call_within(self, name: str, arguments: dict[str, Any], local: str) -> Any:
        live = self._here()
        connection = self._connection(live)
        try:
            try:
                result = await self._call_on(connection, name, arguments)
            except MCPError as exc:
                if not _session_lost(exc):
                    raise
                # The server restarted and refused the old session: the call never ran
                # there, so it is sent once more, on a new session.
                connection = self._renew(live, connection)
                result = await self._call_on(connection, name, arguments)
        except asyncio.TimeoutError:
            raise ToolTimeoutError(
                f"tool {local!r} timed out after {self.timeout:g}s",
                tool=local,
                timeout=self.timeout,
            ) from None
        except MCPError as exc:
            lost = _session_lost(exc)
            if exc.code != CONNECTION_CLOSED and not lost:
                raise ToolExecutionError(
                    f"tool {local!r} failed on MCP server {self.server}: {exc.error.message}",
                    tool=local,
                ) from None
            # The next call starts the server again (or reconnects).
            how = await connection.ended()
            what = "no longer knows the session (it restarted)" if lost else "closed the connection"
            raise MCPServerError(
                f"MCP server {self.server} {what} during a call to {local!r}"
                + (f": {how}" if how else ""),
                server=self.server,
                tool=local,
            ) from None
        return result_value(result, local)

    async def _call_on(self, connection: Connection, name: str, arguments: dict[str, Any]) -> Any:
        session = await connection.session(self.timeout)
        return await asyncio.wait_for(session.call_tool(name, arguments), self.timeout)


class _Live:
    """A toolset's connection and tool list on one event loop."""

    def __init__(self) -> None:
        self.connection: Connection | None = None
        self.tools: tuple[MCPTool, ...] | None = None
        self.stale = False

    def mark_stale(self) -> None:
        self.stale = True


def _stop_all(connections: weakref.WeakSet[Connection]) -> None:
    for connection in list(connections):
        connection.stop_from_anywhere()


def _session_lost(exc: MCPError) -> bool:
    # An HTTP server that restarted answers an old session's requests with 404 (the SDK's
    # "Session not found" / "Session terminated"): the spec says to start a new session.
    message = exc.error.message.lower()
    return exc.code == INVALID_REQUEST and message in ("session not found", "session terminated")


def _page(cursor: str | None) -> Any:
    if cursor is None:
        return None
    from mcp.types import PaginatedRequestParams

    return PaginatedRequestParams(cursor=cursor)


def stdio(
    command: str,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    *,
    prefix: str | None = None,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] | None = None,
    timeout: float = 60.0,
    approval: bool | Callable[..., Any] = False,
    stderr: Stderr = None,
) -> MCPToolset:
    """An MCP server run as a process (`command args...`) speaking over stdin/stdout.

    `prefix` goes before every tool name; `include` / `exclude` filter by the server's
    names; `timeout` bounds the start and every call (seconds); `approval` as for `@tool`.
    `stderr` is where the server's log goes: None (this process's stderr), a file path
    (appended to), a `logging.Logger` (a record a line, INFO) or a text stream. Its last
    lines are kept either way: a server that dies says why in the error.
    """
    params = StdioServerParameters(
        command=command, args=list(args), env=dict(env) if env else None, cwd=cwd
    )
    return MCPToolset(
        server=" ".join([command, *args]),
        transport=_StdioTransport(params, stderr),
        prefix=prefix,
        include=include,
        exclude=exclude,
        timeout=timeout,
        approval=approval,
    )


def http(
    url: str,
    headers: Mapping[str, str] | None = None,
    *,
    prefix: str | None = None,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] | None = None,
    timeout: float = 60.0,
    approval: bool | Callable[..., Any] = False,
) -> MCPToolset:
    """An MCP server over streamable HTTP at `url`, with `headers` on every request;
    the other options as for `stdio`."""
    return MCPToolset(
        server=url,
        transport=_HTTPTransport(url, dict(headers or {})),
        prefix=prefix,
        include=include,
        exclude=exclude,
        timeout=timeout,
        approval=approval,
    )


class _StdioTransport:
    def __init__(self, params: StdioServerParameters, stderr: Stderr) -> None:
        self.params = params
        self.stderr = stderr

    def __call__(self) -> tuple[Any, StdioPeer]:
        peer = StdioPeer()
        return stdio_client(self.params, self.stderr, peer), peer


class _HTTPTransport:
    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.url = url
        self.headers = headers

    def __call__(self) -> tuple[Any, _HTTPPeer]:
        peer = _HTTPPeer()
        return _http_client(self.url, self.headers, peer), peer


# Statuses worth another try: the server is starting, overloaded or behind a proxy that
# lost it for now. Any other (401, 403, 404...) is for the user to fix.
_TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


class _HTTPPeer:
    """The last HTTP error status of one connection, for the error of a failed start."""

    def __init__(self) -> None:
        self.status: int | None = None

    async def record(self, response: Any) -> None:
        if response.status_code >= 400:
            self.status = response.status_code

    def explain(self, error: BaseException) -> tuple[str | None, bool]:
        import httpx2

        if self.status is not None:
            return f"HTTP {self.status} ({type(error).__name__}: {error})", (
                self.status in _TRANSIENT_STATUS
            )
        # Refused, reset, timed out: the server is down or unreachable for now.
        return None, isinstance(error, httpx2.TransportError)

    def note(self) -> str:
        return ""

    def kill(self) -> None:
        pass  # the connection goes with its loop; the server is not ours


@asynccontextmanager
async def _http_client(url: str, headers: dict[str, str], peer: _HTTPPeer) -> Any:
    import httpx2

    async with (
        httpx2.AsyncClient(headers=headers, event_hooks={"response": [peer.record]}) as client,
        streamable_http_client(url, http_client=client) as streams,
    ):
        yield streams

"""MCP tool servers as raygent tools, with the official `mcp` SDK (the `mcp` extra).

`raygent.mcp.stdio(command, args)` (a server process) and `raygent.mcp.http(url)`
(streamable HTTP) give a toolset for an agent's `tools=`: the server's tools, listed once
per connection, called with a timeout and the run's abort signal.

_toolset      `MCPToolset`, `stdio`, `http`: configuration, one connection per event loop
_connection   one SDK session, owned by a task of its own; why a start failed
_stdio        the stdio transport: the server's process, its exit code and stderr
_tools        `MCPTool` (the server's schema, validated here) and results as tool output

May import the base, models and observe (and the `mcp` SDK); agents know toolsets only
through the base's `raygent.toolsets.Toolset`.
"""

from __future__ import annotations

try:
    import mcp as _mcp  # noqa: F401
except ImportError:  # pragma: no cover - the test runs it in a subprocess
    raise ImportError("raygent.mcp needs the mcp extra: pip install 'raygent[mcp]'") from None

from ..errors import MCPServerError
from ._toolset import MCPToolset, http, stdio

__all__ = ["MCPServerError", "MCPToolset", "http", "stdio"]

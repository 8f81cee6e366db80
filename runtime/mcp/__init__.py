"""MCP tool servers as raygent tools, with the official `mcp` SDK (the `mcp` extra).

`raygent.mcp.stdio(command, args)` (a server process) and `raygent.mcp.http(url)`
(streamable HTTP) give a toolset for an agent's `tools=`: the server's tools, listed once
per connection, called with a timeout and the run's abort signal.
"""

from __future__ import annotations

try:
    import mcp as _mcp  # noqa: F401
except ImportError:  # pragma: no cover - the test runs it in a subprocess
    raise ImportError("raygent.mcp needs the mcp extra: pip install 'raygent[mcp]'") from None

from ..errors import MCPServerError
from ._toolset import MCPToolset, http, stdio

__all__ = ["MCPServerError", "MCPToolset", "http", "stdio"]

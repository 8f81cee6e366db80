"""The MCP server of the tests, with the SDK's server side: `python server.py` (stdio) or
`python server.py http PORT` (streamable HTTP)."""

from __future__ import annotations

import asyncio
import base64
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ImageContent

app = MCPServer("raygent-tests")


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@app.tool()
def where() -> str:
    """The server's process id and its parent's (the process that started it)."""
    return f"{os.getpid()} {os.getppid()}"


@app.tool()
def crash() -> str:
    """Kill the server mid-call."""
    os._exit(3)


@app.tool()
async def hang() -> str:
    """Never answer."""
    await asyncio.Event().wait()
    return "unreachable"


@app.tool()
def fail() -> str:
    """Report an error."""
    raise ValueError("no luck")


@app.tool()
def image() -> ImageContent:
    """A 3-byte image."""
    return ImageContent(type="image", data=base64.b64encode(b"PNG").decode(), mime_type="image/png")


@app.tool()
async def grow(ctx: Context) -> str:
    """Add the tool `late` and say so."""
    app.add_tool(lambda: "late tool", name="late", description="Added later.")
    await ctx.request_context.session.send_tool_list_changed()
    return "grown"


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()

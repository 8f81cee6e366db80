"""The MCP server of the tests, with the SDK's server side: `python server.py` (stdio) or
`python server.py http PORT` (streamable HTTP); `--extra` adds the tool `extra`;
`--v1` makes it an mcp 1.x server, which dies at start under the 2.x SDK."""

from __future__ import annotations

import asyncio
import base64
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import AudioContent, CallToolResult, ImageContent, TextContent

if "--v1" in sys.argv:  # 1.x code: the low-level Server has no decorators in 2.x
    from mcp.server.lowlevel import Server

    print("starting the 1.x server", file=sys.stderr, flush=True)
    legacy = Server("raygent-tests-v1")
    legacy.list_resources()  # AttributeError: exit code 1, the traceback on stderr

app = MCPServer("raygent-tests")
PNG = (  # a 1x1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="
)


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
    """A 1x1 PNG."""
    return ImageContent(type="image", data=PNG, mime_type="image/png")


@app.tool()
def chart() -> list[TextContent | ImageContent | AudioContent]:
    """A caption, an image and a sound."""
    return [
        TextContent(type="text", text="the chart:"),
        ImageContent(type="image", data=PNG, mime_type="image/png"),
        AudioContent(type="audio", data=base64.b64encode(b"RIFF").decode(), mime_type="audio/wav"),
    ]


@app.tool()
def fake_image() -> ImageContent:
    """Text that says it is a PNG."""
    data = base64.b64encode(b"<html>not an image</html>").decode()
    return ImageContent(type="image", data=data, mime_type="image/png")


@app.tool()
def weather(city: str) -> CallToolResult:
    """Text and structured content."""
    return CallToolResult(
        content=[TextContent(type="text", text=f"{city}: 18C")],
        structured_content={"city": city, "celsius": 18},
    )


@app.tool()
def reading() -> CallToolResult:
    """Structured content only."""
    return CallToolResult(content=[], structured_content={"celsius": 18})


if "--extra" in sys.argv:  # the same server, upgraded: one more tool

    @app.tool()
    def extra() -> str:
        """A tool only the upgraded server has."""
        return "extra"


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

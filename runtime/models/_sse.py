"""Server-sent events from a byte stream.

Measured: parsing SSE from raw chunks costs a fraction of going through httpx's text and
line decoders (httpx-sse), and a stream is 5-100+ events per model reply.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

__all__ = ["SSE", "iter_sse"]


@dataclass(frozen=True, slots=True)
class SSE:
    event: str | None
    data: str


async def iter_sse(chunks: AsyncIterator[bytes]) -> AsyncGenerator[SSE, None]:
    """Events as they complete. An event cut off by the end of the stream is dropped, as
    the SSE spec says; the caller decides whether the stream was complete."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        if b"\r" in buffer:
            if buffer.endswith(b"\r"):
                continue  # the \n of a \r\n may be in the next chunk
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *complete, buffer = buffer.split(b"\n\n")
        for block in complete:
            event = _parse(block)
            if event is not None:
                yield event


def _parse(block: bytes) -> SSE | None:
    name: str | None = None
    data: list[str] = []
    for line in block.decode("utf-8", "replace").split("\n"):
        if not line or line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
    if not data and name is None:
        return None
    return SSE(name, "\n".join(data))

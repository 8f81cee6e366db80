"""The SSE parser: events however the bytes are split."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from raygent.models._sse import SSE, iter_sse

STREAM = (
    b": keep-alive comment\n\n"
    b'event: message_start\ndata: {"a": 1}\n\n'
    b"data: line one\ndata: line two\n\n"
    b"data:no-space\n\n"
    b"event: ping\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    SSE("message_start", '{"a": 1}'),
    SSE(None, "line one\nline two"),
    SSE(None, "no-space"),
    SSE("ping", ""),
    SSE(None, "[DONE]"),
]


async def chunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def parse(data: bytes, size: int) -> list[SSE]:
    return [event async for event in iter_sse(chunks(data, size))]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 10_000])
async def test_events_whatever_the_chunking(size: int) -> None:
    assert await parse(STREAM, size) == EXPECTED


@pytest.mark.parametrize("size", [1, 5, 10_000])
async def test_crlf_line_endings(size: int) -> None:
    assert await parse(STREAM.replace(b"\n", b"\r\n"), size) == EXPECTED


async def test_an_event_cut_off_by_the_end_is_dropped() -> None:
    assert await parse(b"data: whole\n\ndata: half", 4) == [SSE(None, "whole")]


async def test_invalid_utf8_does_not_raise() -> None:
    [event] = await parse(b"data: \xff\xfe\n\n", 3)
    assert event.data == "\ufffd\ufffd"

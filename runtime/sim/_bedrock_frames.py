"""AWS's binary event-stream framing (``application/vnd.amazon.eventstream``), as
ConverseStream sends it: each message is a prelude (total length, headers length, the
prelude's CRC32), string headers, a JSON payload, and the message's CRC32."""

from __future__ import annotations

import struct
import zlib
from typing import Any

from pydantic_core import to_json

CONTENT_TYPE = "application/vnd.amazon.eventstream"
_STRING = 7  # the header value type of a UTF-8 string
_PRELUDE = struct.Struct(">II")


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message."""
    encoded = b"".join(_header(name, value) for name, value in headers.items())
    total = _PRELUDE.size + 4 + len(encoded) + len(payload) + 4
    prelude = _PRELUDE.pack(total, len(encoded))
    head = prelude + struct.pack(">I", zlib.crc32(prelude)) + encoded + payload
    return head + struct.pack(">I", zlib.crc32(head))


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return (
        struct.pack(">B", len(raw_name))
        + raw_name
        + struct.pack(">BH", _STRING, len(raw_value))
        + raw_value
    )


def event(kind: str, data: dict[str, Any]) -> bytes:
    """An event of ConverseStream's output union (``messageStart``, ``metadata``, ...)."""
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return frame(headers, to_json(data))


def exception(kind: str, data: dict[str, Any]) -> bytes:
    """An exception inside a 200 stream; `kind` is the union member's name
    (``throttlingException``, ``modelStreamErrorException``, ...)."""
    headers = {
        ":exception-type": kind,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return frame(headers, to_json(data))

"""Keys, payload encodings, batch identities and error records shared by the stores.

Memory and SQLite keep each message as its JSON (same speed as msgpack here, and
readable with the sqlite3 shell); Redis keeps msgpack envelopes. Decoding never lets a
raw msgpack or pydantic exception out: it raises StoreDataError naming the position.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, NamedTuple, cast
from urllib.parse import quote

import msgpack
from pydantic import BaseModel, ConfigDict, ValidationError

from raygent.errors import RaygentError
from raygent.messages import MESSAGE_ADAPTER, MESSAGES_ADAPTER, Message
from raygent.redaction import redact_value

from .protocol import ErrorRecord, Scope, StoreDataError

NONE_PART = "!"  # quote() always escapes "!", so no string encodes to it
_REF = re.compile(r"[A-Za-z0-9_.~%!:-]+")
_PLAIN = re.compile(r"[A-Za-z0-9_.~-]+")  # the characters quote() never escapes


def scope_key(scope: Scope, key_metadata: Sequence[str]) -> str:
    """session, user and the key-metadata values, each escaped, joined by ':'.

    quote(safe="") escapes ':' and '!', so parts never contain the separator and None
    ("!") never equals a string: different scopes can never share a key.
    """
    parts = [_escaped(scope.session_id)]
    for value in (scope.user_id, *(scope.metadata.get(k) for k in key_metadata)):
        parts.append(NONE_PART if value is None else _escaped(value))
    return ":".join(parts)


def _escaped(value: str) -> str:
    # What quote(safe="") leaves as it is needs no call to it (most ids: a key is made
    # on every store call).
    return value if _PLAIN.fullmatch(value) else quote(value, safe="")


def check_ref(ref: str) -> str:
    """A ref as scope_key builds it; anything else is refused before it reaches a query."""
    if not isinstance(ref, str) or not _REF.fullmatch(ref):
        raise ValueError(f"not a conversation ref: {ref!r}")
    return ref


def to_datetime(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=timezone.utc)


def to_timestamp(moment: float | datetime) -> float:
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            raise ValueError("give an aware datetime (a naive one has no fixed instant)")
        return moment.timestamp()
    return float(moment)


def encode_json(message: Message) -> bytes:
    # The message class's own serializer: the same bytes as MESSAGE_ADAPTER.dump_json,
    # without the union's dispatch on every message written.
    encoded: bytes = type(message).__pydantic_serializer__.to_json(message)
    return encoded


def encode_msgpack(message: Message) -> bytes:
    packed: bytes = msgpack.packb(MESSAGE_ADAPTER.dump_python(message, mode="json"))
    return packed


def encode_batch(
    ref: str, messages: Sequence[Message], encode: Callable[[Message], bytes]
) -> list[bytes]:
    """Encode every message before anything is written, so a failure writes nothing."""
    payloads = []
    for index, message in enumerate(messages):
        try:
            payloads.append(encode(message))
        except Exception as exc:  # pydantic raises several types for unserialisable data
            raise StoreDataError(
                f"message {index} of the batch cannot be encoded: {exc}",
                ref=ref,
                position=None,
                batch_index=index,
            ) from exc
    return payloads


def batch_id(run_id: str, turn: int, payloads: Sequence[bytes]) -> bytes:
    """The identity of one batch: run, turn and exact content (length-prefixed parts)."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (run_id.encode(), str(turn).encode(), *payloads):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.digest()


def _bad(ref: str, position: int | None, exc: BaseException | str) -> StoreDataError:
    where = f"position {position}" if position is not None else "an error record"
    return StoreDataError(
        f"stored data of conversation {ref!r} at {where} is malformed: {exc}",
        ref=ref,
        position=position,
        reason=str(exc),
    )


def decode_json(ref: str, payloads: Sequence[bytes | str], first: int = 0) -> list[Message]:
    """Decode JSON payloads stored at positions first, first+1, ...

    One validate_json over the joined array is the fast path; on any failure (or a
    payload that smuggles in two messages) each payload is decoded alone to name the
    position at fault.
    """
    if not payloads:
        return []
    try:
        if isinstance(payloads[0], bytes):  # a str among bytes fails the join: slow path
            joined: bytes | str = b"[" + b",".join(cast(Sequence[bytes], payloads)) + b"]"
        else:
            joined = "[" + ",".join(cast(Sequence[str], payloads)) + "]"
        messages = MESSAGES_ADAPTER.validate_json(joined)
        if len(messages) == len(payloads):
            return messages
    except (ValueError, TypeError):  # ValidationError is a ValueError
        pass
    decoded = []
    for offset, payload in enumerate(payloads):
        try:
            decoded.append(MESSAGE_ADAPTER.validate_json(payload))
        except (ValueError, TypeError) as exc:
            raise _bad(ref, first + offset, exc) from None
    return decoded


class Envelope(NamedTuple):
    run_id: str
    turn: int
    created_at: float
    message: Message


def envelope_header(run_id: str, turn: int, created_at: float) -> bytes:
    """The start of a msgpack array [run_id, turn, created_at, message]; append a payload."""
    packed: bytes = msgpack.packb(run_id) + msgpack.packb(turn) + msgpack.packb(created_at)
    return b"\x94" + packed  # 0x94: a fixarray of four


def _unpack_envelope(raw: bytes) -> tuple[str, int, float, Any]:
    value = msgpack.unpackb(raw)
    if (
        not isinstance(value, list)
        or len(value) != 4
        or not isinstance(value[0], str)
        or not isinstance(value[1], int)
        or not isinstance(value[2], (int, float))
    ):
        raise ValueError("not a [run_id, turn, created_at, message] envelope")
    return value[0], value[1], float(value[2]), value[3]


def decode_envelopes(ref: str, elements: Sequence[bytes], first: int = 0) -> list[Envelope]:
    """Decode Redis list elements stored at positions first, first+1, ..."""
    unpacked = []
    for offset, raw in enumerate(elements):
        try:
            unpacked.append(_unpack_envelope(raw))
        except Exception as exc:  # msgpack raises several unrelated types
            raise _bad(ref, first + offset, exc) from None
    try:
        messages = MESSAGES_ADAPTER.validate_python([u[3] for u in unpacked])
    except ValidationError as whole:
        for offset, item in enumerate(unpacked):
            try:
                MESSAGE_ADAPTER.validate_python(item[3])
            except ValidationError as exc:
                raise _bad(ref, first + offset, exc) from None
        raise _bad(ref, first, whole) from None  # the list failed, so an item did too
    return [Envelope(u[0], u[1], u[2], m) for u, m in zip(unpacked, messages, strict=True)]


class _ErrorRow(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    run_id: str
    created_at: float
    error: dict[str, Any]
    messages: list[Message]


def error_dict(error: RaygentError | Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-safe copy: details may hold anything, and recording must not fail on it.
    Redacted after the copy, since `str()` of an odd detail may show a key."""
    raw = error.to_dict() if isinstance(error, RaygentError) else dict(error)
    value: dict[str, Any] = redact_value(json.loads(json.dumps(raw, default=str)))
    return value


def encode_error(
    ref: str,
    run_id: str,
    error: RaygentError | Mapping[str, Any],
    messages: Sequence[Message],
    created_at: float,
) -> bytes:
    encode_batch(ref, messages, encode_json)  # names the message that cannot be encoded
    row = _ErrorRow(
        run_id=run_id, created_at=created_at, error=error_dict(error), messages=list(messages)
    )
    return row.model_dump_json().encode()


def decode_error(ref: str, raw: bytes | str) -> ErrorRecord:
    try:
        row = _ErrorRow.model_validate_json(raw)
    except (ValueError, TypeError) as exc:
        raise _bad(ref, None, exc) from None
    return ErrorRecord(row.run_id, row.error, row.messages, to_datetime(row.created_at))

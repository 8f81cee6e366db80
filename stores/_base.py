"""What every store shares: validation, keys, encoding, batch identity, time.

`BaseStore` is the conversation half's configuration and checks; the durable-run half
builds on it in _runs (`BaseRunStore`), which every store extends.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from raygent.messages import AssistantMessage, Message, SystemMessage, ToolMessage, UserMessage

from ._codec import batch_id, encode_batch, scope_key, to_timestamp
from .protocol import PositionConflictError, Scope

MAX_BATCH_IDS = 256  # idempotency records kept per conversation
MAX_ERRORS = 1000  # error records kept per conversation
COMPACTED_TURN = -1  # the turn recorded on messages written by replace_prefix
_MESSAGE_TYPES = (SystemMessage, UserMessage, AssistantMessage, ToolMessage)

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Batch:
    """One append, validated and encoded, ready for a backend to commit."""

    ref: str
    scope: Scope
    run_id: str
    turn: int
    payloads: list[bytes]
    batch_id: bytes
    expected_position: int | None
    now: float


def check_messages(messages: Sequence[Message]) -> list[Message]:
    listed = list(messages)
    for message in listed:
        if not isinstance(message, _MESSAGE_TYPES):
            raise TypeError(f"not a raygent message: {type(message).__name__}")
    return listed


def conflict(ref: str, expected: int, actual: int) -> PositionConflictError:
    return PositionConflictError(
        f"conversation {ref!r} has {actual} messages, the writer expected {expected}",
        ref=ref,
        expected=expected,
        actual=actual,
    )


def shifted(first: int, count: int, delta: int) -> int:
    """Where a batch recorded at `first` starts after replacing the first `count` messages.

    A batch inside the replaced prefix now lives in the replacement: it maps to 0.
    """
    return first + delta if first >= count else 0


class BaseStore:
    """Configuration and the checks every store runs before touching storage.

    `clock` gives the time for timestamps, ttl expiry and prune (tests pass a fake one;
    Redis expires keys on its own clock).
    """

    def __init__(
        self,
        *,
        key_metadata: Sequence[str] = (),
        ttl: float | None = None,
        clock: Clock = time.time,
    ) -> None:
        if isinstance(key_metadata, str):
            raise TypeError("key_metadata is a sequence of names, e.g. ('tenant',)")
        self.key_metadata = tuple(key_metadata)
        if len(set(self.key_metadata)) != len(self.key_metadata):
            raise ValueError("key_metadata names must be unique")
        if ttl is not None and ttl <= 0:
            raise ValueError("ttl must be positive seconds or None")
        self.ttl = ttl
        self.clock = clock

    def ref(self, scope: Scope) -> str:
        if not isinstance(scope, Scope):
            raise TypeError(f"expected a Scope, got {type(scope).__name__}")
        return scope_key(scope, self.key_metadata)

    def _encode(self, message: Message) -> bytes:
        raise NotImplementedError

    def _batch(
        self,
        scope: Scope,
        run_id: str,
        turn: int,
        messages: Sequence[Message],
        expected_position: int | None,
    ) -> Batch:
        if not isinstance(run_id, str) or not isinstance(turn, int):
            raise TypeError("run_id must be a str and turn an int")
        if expected_position is not None and (
            not isinstance(expected_position, int) or expected_position < 0
        ):
            raise ValueError("expected_position must be a non-negative int or None")
        listed = check_messages(messages)
        if not listed:
            raise ValueError("an append needs at least one message")
        ref = self.ref(scope)
        payloads = encode_batch(ref, listed, self._encode)
        return Batch(
            ref=ref,
            scope=scope,
            run_id=run_id,
            turn=turn,
            payloads=payloads,
            batch_id=batch_id(run_id, turn, payloads),
            expected_position=expected_position,
            now=self.clock(),
        )

    def _expired(self, updated_at: float, now: float) -> bool:
        return updated_at < self._live_since(now)

    def _live_since(self, now: float) -> float:
        """The oldest write time that has not expired (-inf without a ttl).

        Expired means last written before now - ttl: the cutoff prune(None) uses too.
        """
        return float("-inf") if self.ttl is None else now - self.ttl

    def _prune_cutoff(self, older_than: float | datetime | None) -> float | None:
        """The cutoff for prune; None when there is nothing to prune (no ttl given)."""
        if older_than is not None:
            return to_timestamp(older_than)
        return None if self.ttl is None else self.clock() - self.ttl

"""What every store's durable runs share: argument checks and the conflict error.

A run lives under the same ref as a conversation (`BaseStore.ref`), but in its own
tables or keys, so a run and a conversation with one id never see each other.
"""

from __future__ import annotations

from typing import Literal

from .protocol import RunConflictError

__all__ = ["FIRST_EPOCH", "Reason", "check_bytes", "check_epoch", "check_seq", "run_conflict"]

FIRST_EPOCH = 1
# "finished": an append to a run that finish_run has closed.
Reason = Literal["epoch", "sequence", "exists", "missing", "finished"]

_MESSAGES: dict[str, str] = {
    "epoch": "is held by epoch {actual}, the writer holds epoch {expected}",
    "sequence": "has {actual} entries, the writer sent entry {expected}",
    "exists": "already exists (epoch {actual})",
    "missing": "does not exist (or expired)",
    "finished": "is finished; it takes no more entries",
}


def run_conflict(
    ref: str, reason: Reason, expected: int | None, actual: int | None
) -> RunConflictError:
    text = _MESSAGES[reason].format(expected=expected, actual=actual)
    return RunConflictError(
        f"run {ref!r} {text}", ref=ref, reason=reason, expected=expected, actual=actual
    )


def check_bytes(name: str, value: bytes) -> bytes:
    if not isinstance(value, bytes):
        raise TypeError(f"{name} must be bytes, not {type(value).__name__}")
    return value


def check_epoch(epoch: int) -> int:
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < FIRST_EPOCH:
        raise ValueError(f"epoch must be an int >= {FIRST_EPOCH}, not {epoch!r}")
    return epoch


def check_seq(seq: int) -> int:
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise ValueError(f"seq must be a non-negative int, not {seq!r}")
    return seq

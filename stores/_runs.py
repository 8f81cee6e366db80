"""The durable-run half every store shares: `BaseRunStore`, the RunStore methods.

`BaseRunStore` checks the arguments, makes the run's ref and the time of a write, and
hands them to the backend's storage primitives (`_start_run` ... `_prune_runs`), each
atomic in its storage. What a fenced write decides, given the run's state (`held`,
`takes_entry`), and the conflict error with its reasons live here too, so that a backend
that reads the state before it writes (memory, SQLite) or after a write changed nothing
(PostgreSQL) says the same thing; Redis decides in its scripts and names the reason.

A run lives under the same ref as a conversation (`BaseStore.ref`), but in its own
tables or keys, so a run and a conversation with one id never see each other.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from ._base import BaseStore
from .protocol import RunConflictError, RunRecord, Scope

__all__ = [
    "FIRST_EPOCH",
    "BaseRunStore",
    "Reason",
    "RunState",
    "held",
    "run_conflict",
    "takes_entry",
]

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


class RunState(NamedTuple):
    """What a fenced write checks of a live run: who holds it, its entries, its end."""

    epoch: int
    length: int
    finished: bool


def held(ref: str, state: RunState | None, epoch: int) -> RunState:
    """The run's state if `epoch` holds it; else the conflict (missing, or another epoch).

    `state` is None when the run is absent or expired."""
    if state is None:
        raise run_conflict(ref, "missing", epoch, None)
    if state.epoch != epoch:
        raise run_conflict(ref, "epoch", epoch, state.epoch)
    return state


def takes_entry(
    ref: str, state: RunState | None, epoch: int, seq: int, entry: bytes, stored: bytes | None
) -> bool:
    """Whether the run takes `entry` as entry `seq`: True, write it; False, it is a retry
    of a committed append (`stored`, the entry at `seq` if any, is the same bytes), so
    nothing is written; else the conflict."""
    state = held(ref, state, epoch)
    if state.finished:
        raise run_conflict(ref, "finished", epoch, epoch)
    if seq < state.length and stored == entry:
        return False
    if seq != state.length:
        raise run_conflict(ref, "sequence", seq, state.length)
    return True


def _check_bytes(name: str, value: bytes) -> None:
    if not isinstance(value, bytes):
        raise TypeError(f"{name} must be bytes, not {type(value).__name__}")


def _check_epoch(epoch: int) -> None:
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < FIRST_EPOCH:
        raise ValueError(f"epoch must be an int >= {FIRST_EPOCH}, not {epoch!r}")


def _check_seq(seq: int) -> None:
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise ValueError(f"seq must be a non-negative int, not {seq!r}")


class BaseRunStore(BaseStore):
    """The RunStore methods of every store, over the primitives its backend supplies.

    A primitive takes the run's ref (and a write the time, `now`); it raises the
    conflict (`run_conflict`) when the run refuses the write, and writes nothing then.
    """

    async def start_run(self, scope: Scope, header: bytes) -> int:
        _check_bytes("header", header)
        await self._start_run(self.ref(scope), header, self.clock())
        return FIRST_EPOCH

    async def append_run(self, scope: Scope, epoch: int, seq: int, entry: bytes) -> None:
        _check_epoch(epoch)
        _check_seq(seq)
        _check_bytes("entry", entry)
        await self._append_run(self.ref(scope), epoch, seq, entry, self.clock())

    async def claim_run(self, scope: Scope, epoch: int) -> int:
        _check_epoch(epoch)
        return await self._claim_run(self.ref(scope), epoch, self.clock())

    async def load_run(self, scope: Scope) -> RunRecord | None:
        return await self._load_run(self.ref(scope))

    async def finish_run(
        self, scope: Scope, epoch: int, outcome: bytes, *, drop_entries: bool = False
    ) -> None:
        _check_epoch(epoch)
        _check_bytes("outcome", outcome)
        ref, now = self.ref(scope), self.clock()
        await self._finish_run(ref, epoch, outcome, bool(drop_entries), now)

    async def delete_run(self, scope: Scope) -> None:
        await self._delete_run(self.ref(scope))

    # -- the backend's primitives ----------------------------------------------------

    async def _start_run(self, ref: str, header: bytes, now: float) -> None:
        """Create the run at FIRST_EPOCH (replacing an expired one); "exists" if live."""
        raise NotImplementedError

    async def _append_run(self, ref: str, epoch: int, seq: int, entry: bytes, now: float) -> None:
        """Append `entry` at `seq` as `takes_entry` decides."""
        raise NotImplementedError

    async def _claim_run(self, ref: str, epoch: int, now: float) -> int:
        """Bump the epoch if `epoch` holds the run (`held`); returns the new epoch."""
        raise NotImplementedError

    async def _load_run(self, ref: str) -> RunRecord | None:
        """The live run, read together; None if absent or expired."""
        raise NotImplementedError

    async def _finish_run(
        self, ref: str, epoch: int, outcome: bytes, drop_entries: bool, now: float
    ) -> None:
        """Set the outcome if `epoch` holds the run (`held`); drop the entries if asked."""
        raise NotImplementedError

    async def _delete_run(self, ref: str) -> None:
        """Remove the run (a no-op when absent)."""
        raise NotImplementedError

    async def _prune_runs(self, cutoff: float) -> int:
        """Remove the runs last written before `cutoff`; returns how many (the store's
        `prune` calls it after its conversations)."""
        raise NotImplementedError

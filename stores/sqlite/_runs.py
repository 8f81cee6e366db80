"""SQLiteStore's durable runs: the primitives of BaseRunStore over the store's worker.

Tables raygent_runs (one row per run: epoch, outcome, updated_at) and
raygent_run_entries ((ref, seq) -> bytes and its write time; the header is seq -1),
apart from the conversation tables. Every write is one transaction that takes the write
lock before it reads (BEGIN IMMEDIATE, or a single INSERT ... SELECT): the check of epoch
and length and the write are one critical section across processes. An append inserts
one entry row and writes nothing else (the run row is not rewritten: a run's length is
that of its entries, its age that of its newest row); it never rewrites the header or
entries.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TypeVar

from .._codec import to_datetime
from .._runs import FIRST_EPOCH, BaseRunStore, RunState, held, run_conflict, takes_entry
from ..protocol import RunRecord, StoreDataError
from ._db import immediate

__all__ = ["SQLiteRuns"]

T = TypeVar("T")
Db = sqlite3.Connection
HEADER_SEQ = -1
_PRUNE_CHUNK = 500  # rows per prune transaction: keeps the write lock short

# A run's epoch, whether it is finished, its last write time and its length, from its
# row and its newest entry row (the header alone: length 0). One index lookup each.
_RUN = """
SELECT r.epoch, r.outcome IS NOT NULL, max(r.updated_at, coalesce(e.at, r.updated_at)),
    coalesce(e.seq, -1) + 1
FROM raygent_runs AS r LEFT JOIN (
    SELECT seq, at FROM raygent_run_entries WHERE ref = ?1 ORDER BY seq DESC LIMIT 1
) AS e
WHERE r.ref = ?1
"""
# Runs whose newest row was written before ?1: the run row's time narrows them down.
_STALE = """
SELECT r.ref FROM raygent_runs AS r
WHERE r.updated_at < ?1 AND coalesce((
    SELECT e.at FROM raygent_run_entries AS e WHERE e.ref = r.ref ORDER BY e.seq DESC LIMIT 1
), r.updated_at) < ?1
LIMIT ?2
"""
# An append as one statement (its own transaction: a write statement takes the write
# lock before it reads, as BEGIN IMMEDIATE does): the entry goes in only if ?5 holds the
# unfinished, live (?6) run and ?2 follows its newest entry. Nothing inserted: the
# checks run again, one by one, to say why (or to find a retry of a committed append).
_APPEND = """
INSERT INTO raygent_run_entries (ref, seq, entry, at)
SELECT ?1, ?2, ?3, ?4 FROM raygent_runs AS r
WHERE r.ref = ?1 AND r.epoch = ?5 AND r.outcome IS NULL AND (
    SELECT e.seq = ?2 - 1 AND max(r.updated_at, coalesce(e.at, r.updated_at)) >= ?6
    FROM raygent_run_entries AS e WHERE e.ref = ?1 ORDER BY e.seq DESC LIMIT 1
)
"""
# `length` is version 2's entry count, no longer kept. Nothing inserted: the run exists.
_START = """
INSERT OR IGNORE INTO raygent_runs (ref, epoch, length, outcome, updated_at)
VALUES (?1, ?2, 0, NULL, ?3)
"""
# The outcome, if ?2 holds the live (?3) run.
_FINISH = """
UPDATE raygent_runs SET outcome = ?4, updated_at = ?5
WHERE ref = ?1 AND epoch = ?2 AND max(updated_at, coalesce((
    SELECT e.at FROM raygent_run_entries AS e WHERE e.ref = ?1 ORDER BY e.seq DESC LIMIT 1
), updated_at)) >= ?3
"""
_ENTRY = "SELECT entry FROM raygent_run_entries WHERE ref = ? AND seq = ?"
_INSERT_ENTRY = "INSERT INTO raygent_run_entries (ref, seq, entry, at) VALUES (?, ?, ?, ?)"


def _delete_run(db: Db, ref: str) -> None:
    db.execute("DELETE FROM raygent_run_entries WHERE ref = ?", (ref,))
    db.execute("DELETE FROM raygent_runs WHERE ref = ?", (ref,))


class SQLiteRuns(BaseRunStore):
    """The run primitives of SQLiteStore (which provides `_run` and `_write`)."""

    async def _run(self, fn: Callable[[Db], T]) -> T:
        raise NotImplementedError

    async def _write(self, fn: Callable[[Db], T]) -> T:
        raise NotImplementedError

    def _run_state(self, db: Db, ref: str, now: float) -> RunState | None:
        """The state of a live run; None when absent or expired."""
        row = db.execute(_RUN, (ref,)).fetchone()
        if row is None or self._expired(row[2], now):
            return None
        return RunState(int(row[0]), int(row[3]), bool(row[1]))

    async def _start_run(self, ref: str, header: bytes, now: float) -> None:
        def write(db: Db) -> None:
            with immediate(db):
                if db.execute(_START, (ref, FIRST_EPOCH, now)).rowcount == 0:
                    row = db.execute(_RUN, (ref,)).fetchone()
                    if not self._expired(row[2], now):
                        raise run_conflict(ref, "exists", None, int(row[0]))
                    _delete_run(db, ref)  # it expired: a new run takes its place
                    db.execute(_START, (ref, FIRST_EPOCH, now))
                db.execute(_INSERT_ENTRY, (ref, HEADER_SEQ, header, now))

        await self._write(write)

    async def _append_run(self, ref: str, epoch: int, seq: int, entry: bytes, now: float) -> None:
        def write(db: Db) -> None:
            since = self._live_since(now)
            if db.execute(_APPEND, (ref, seq, entry, now, epoch, since)).rowcount == 1:
                return
            with immediate(db):
                state = self._run_state(db, ref, now)
                row = db.execute(_ENTRY, (ref, seq)).fetchone()
                stored = None if row is None else bytes(row[0])
                if takes_entry(ref, state, epoch, seq, entry, stored):
                    db.execute(_INSERT_ENTRY, (ref, seq, entry, now))

        await self._write(write)

    async def _claim_run(self, ref: str, epoch: int, now: float) -> int:
        def write(db: Db) -> int:
            with immediate(db):
                held(ref, self._run_state(db, ref, now), epoch)
                db.execute(
                    "UPDATE raygent_runs SET epoch = ?, updated_at = ? WHERE ref = ?",
                    (epoch + 1, now, ref),
                )
            return epoch + 1

        return await self._write(write)

    async def _finish_run(
        self, ref: str, epoch: int, outcome: bytes, drop_entries: bool, now: float
    ) -> None:
        def write(db: Db) -> None:
            with immediate(db):
                finished = (ref, epoch, self._live_since(now), outcome, now)
                if db.execute(_FINISH, finished).rowcount == 0:
                    held(ref, self._run_state(db, ref, now), epoch)  # raises: not held
                if drop_entries:
                    db.execute("DELETE FROM raygent_run_entries WHERE ref = ? AND seq >= 0", (ref,))

        await self._write(write)

    async def _load_run(self, ref: str) -> RunRecord | None:
        return await self._run(lambda db: self._read_run(db, ref))

    def _read_run(self, db: Db, ref: str) -> RunRecord | None:
        now = self.clock()
        db.execute("BEGIN")  # one read transaction: the row and the entries agree
        try:
            row = db.execute(
                "SELECT epoch, outcome, updated_at FROM raygent_runs WHERE ref = ?", (ref,)
            ).fetchone()
            entries = db.execute(
                "SELECT seq, entry, at FROM raygent_run_entries WHERE ref = ? ORDER BY seq",
                (ref,),
            ).fetchall()
        finally:
            db.execute("COMMIT")
        if row is None:
            return None
        epoch, outcome, updated_at = row
        updated_at = max([updated_at, *(at for _, _, at in entries if at is not None)])
        if self._expired(updated_at, now):
            return None
        length = len(entries) - 1
        if [seq for seq, _, _ in entries] != list(range(HEADER_SEQ, length)):
            raise StoreDataError(
                f"run {ref!r} does not have its header and {length} entries in order",
                ref=ref,
                position=None,
                reason="gap",
            )
        return RunRecord(
            ref=ref,
            epoch=int(epoch),
            header=bytes(entries[0][1]),
            entries=[bytes(entry) for _, entry, _ in entries[1:]],
            outcome=None if outcome is None else bytes(outcome),
            updated_at=to_datetime(updated_at),
        )

    async def _delete_run(self, ref: str) -> None:
        def write(db: Db) -> None:
            with immediate(db):
                _delete_run(db, ref)

        await self._write(write)

    async def _prune_runs(self, cutoff: float) -> int:
        """Remove the runs last written before `cutoff`; returns how many."""
        return await self._prune_table(_STALE, _delete_run, cutoff)

    async def _prune_table(
        self, stale: str, delete: Callable[[Db, str], None], cutoff: float
    ) -> int:
        """Remove what the query `stale` (refs last written before ?1, at most ?2 of
        them) finds, conversations or runs, a chunk per transaction so the write lock
        stays short."""

        def chunk(db: Db) -> int:
            with immediate(db):
                refs = db.execute(stale, (cutoff, _PRUNE_CHUNK)).fetchall()
                for (ref,) in refs:
                    delete(db, ref)
            return len(refs)

        removed = 0
        while True:
            done = await self._run(chunk)
            removed += done
            if done < _PRUNE_CHUNK:
                return removed

"""PostgresStore's durable runs: the primitives of BaseRunStore over the store's pool.

Every write is one statement of _sql (RUN_*, its own transaction) whose
UPDATE is conditional on the epoch, so a fenced-out writer changes nothing; when it
changes nothing, a second read (RUN_STATE) says why.
"""

from __future__ import annotations

from typing import Any

from .._codec import to_datetime
from .._runs import FIRST_EPOCH, BaseRunStore, RunState, held, run_conflict, takes_entry
from ..protocol import RunRecord
from ._pool import Pool, translated

__all__ = ["PostgresRuns"]

_PRUNE_CHUNK = 500  # rows per prune statement: keeps row locks short


class PostgresRuns(BaseRunStore):
    """The run primitives of PostgresStore (which provides `_pool`, its statements `_q`
    on its schema, and the DSN's `_password` to mask in errors)."""

    _password: str | None
    _q: dict[str, str]

    async def _pool(self) -> Pool:
        raise NotImplementedError

    def _run_args(self, ref: str, now: float, **more: Any) -> dict[str, Any]:
        return {"ref": ref, "now": now, "since": self._live_since(now), **more}

    async def _run_fetch(self, query: str, args: dict[str, Any]) -> list[tuple[Any, ...]]:
        pool = await self._pool()
        with translated(args.get("ref"), self._password):
            async with pool.connection() as conn:
                cursor = await conn.execute(self._q[query], args)
                return await cursor.fetchall() if cursor.description else []

    async def _run_state(self, args: dict[str, Any]) -> tuple[RunState | None, bytes | None]:
        """The live run's state and its entry at args["seq"] (if given and stored)."""
        rows = await self._run_fetch("RUN_STATE", {"seq": 0, **args})
        if not rows:
            return None, None
        epoch, length, finished, stored = rows[0]
        state = RunState(int(epoch), int(length), bool(finished))
        return state, None if stored is None else bytes(stored)

    async def _start_run(self, ref: str, header: bytes, now: float) -> None:
        args = self._run_args(ref, now, header=header, epoch=FIRST_EPOCH)
        pool = await self._pool()
        with translated(ref, self._password):
            async with pool.connection() as conn, conn.transaction():
                await conn.execute(self._q["RUN_DROP_EXPIRED"], args)
                cursor = await conn.execute(self._q["RUN_START"], args)
                started = await cursor.fetchall()
        if not started:
            state, _ = await self._run_state(args)
            raise run_conflict(ref, "exists", None, None if state is None else state.epoch)

    async def _append_run(self, ref: str, epoch: int, seq: int, entry: bytes, now: float) -> None:
        args = self._run_args(ref, now, epoch=epoch, seq=seq, entry=entry)
        if await self._run_fetch("RUN_APPEND", args):
            return
        state, stored = await self._run_state(args)
        if takes_entry(ref, state, epoch, seq, entry, stored):  # not a retry: it moved
            raise run_conflict(ref, "sequence", seq, None if state is None else state.length)

    async def _claim_run(self, ref: str, epoch: int, now: float) -> int:
        args = self._run_args(ref, now, epoch=epoch)
        rows = await self._run_fetch("RUN_CLAIM", args)
        if not rows:
            held(ref, (await self._run_state(args))[0], epoch)
            raise run_conflict(ref, "epoch", epoch, None)  # claimed meanwhile
        return int(rows[0][0])

    async def _load_run(self, ref: str) -> RunRecord | None:
        rows = await self._run_fetch("RUN_LOAD", self._run_args(ref, self.clock()))
        if not rows:
            return None
        epoch, header, outcome, updated_at, _ = rows[0]
        return RunRecord(
            ref=ref,
            epoch=int(epoch),
            header=bytes(header),
            entries=[bytes(row[4]) for row in rows if row[4] is not None],
            outcome=None if outcome is None else bytes(outcome),
            updated_at=to_datetime(updated_at),
        )

    async def _finish_run(
        self, ref: str, epoch: int, outcome: bytes, drop_entries: bool, now: float
    ) -> None:
        args = self._run_args(ref, now, epoch=epoch, outcome=outcome, drop=drop_entries)
        [(updated,)] = await self._run_fetch("RUN_FINISH", args)
        if not updated:
            held(ref, (await self._run_state(args))[0], epoch)
            raise run_conflict(ref, "epoch", epoch, None)  # claimed meanwhile

    async def _delete_run(self, ref: str) -> None:
        await self._run_fetch("RUN_DELETE", {"ref": ref})

    async def _prune_runs(self, cutoff: float) -> int:
        return await self._prune_chunks("PRUNE_RUNS", cutoff)

    async def _prune_chunks(self, query: str, cutoff: float) -> int:
        """Run the prune statement `query` (conversations or runs) a chunk at a time, so
        row locks stay short; returns how many it removed."""
        removed = 0
        while True:
            args = {"cutoff": cutoff, "chunk": _PRUNE_CHUNK}
            [(done,)] = await self._run_fetch(query, args)
            removed += int(done)
            if done < _PRUNE_CHUNK:
                return removed

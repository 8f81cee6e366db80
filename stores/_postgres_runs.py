"""PostgresStore's durable runs (the RunStore protocol): a row per run, keyed by ref,
and a row per entry, keyed (ref, seq). Every write is one statement (its own
transaction) whose UPDATE is conditional on the epoch, so a fenced-out writer changes
nothing; when it changes nothing, a second read says why."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._codec import to_datetime
from ._postgres_pool import translated
from .protocol import RunConflictError, RunRecord, Scope

if TYPE_CHECKING:
    from ._postgres_pool import Pool

FIRST_EPOCH = 1

_LIVE = "updated_at >= %(since)s"
_QUERIES = {
    "RUN_DROP_EXPIRED": """
        WITH old AS (DELETE FROM {s}.runs WHERE ref = %(ref)s AND updated_at < %(since)s
                     RETURNING ref)
        DELETE FROM {s}.run_entries WHERE ref IN (SELECT ref FROM old)""",
    "RUN_START": """
        INSERT INTO {s}.runs VALUES (%(ref)s, %(epoch)s, %(header)s, 0, NULL, %(now)s)
        ON CONFLICT (ref) DO NOTHING RETURNING epoch""",
    "RUN_APPEND": f"""
        WITH up AS (
            UPDATE {{s}}.runs SET entries = entries + 1, updated_at = %(now)s
            WHERE ref = %(ref)s AND epoch = %(epoch)s AND entries = %(seq)s
              AND outcome IS NULL AND {_LIVE}
            RETURNING ref)
        INSERT INTO {{s}}.run_entries SELECT ref, %(seq)s, %(entry)s FROM up RETURNING 1""",
    "RUN_STATE": f"""
        SELECT r.epoch, r.entries, r.outcome IS NOT NULL,
               (SELECT e.entry FROM {{s}}.run_entries e WHERE e.ref = r.ref AND e.seq = %(seq)s)
        FROM {{s}}.runs r WHERE r.ref = %(ref)s AND r.{_LIVE}""",
    "RUN_CLAIM": f"""
        UPDATE {{s}}.runs SET epoch = epoch + 1, updated_at = %(now)s
        WHERE ref = %(ref)s AND epoch = %(epoch)s AND {_LIVE} RETURNING epoch""",
    "RUN_LOAD": """
        SELECT r.epoch, r.header, r.outcome, r.updated_at, e.entry
        FROM {s}.runs r LEFT JOIN {s}.run_entries e ON e.ref = r.ref
        WHERE r.ref = %(ref)s AND r.updated_at >= %(since)s ORDER BY e.seq""",
    "RUN_FINISH": f"""
        WITH up AS (
            UPDATE {{s}}.runs SET outcome = %(outcome)s, updated_at = %(now)s,
                entries = CASE WHEN %(drop)s THEN 0 ELSE entries END
            WHERE ref = %(ref)s AND epoch = %(epoch)s AND {_LIVE} RETURNING ref),
        d AS (DELETE FROM {{s}}.run_entries WHERE %(drop)s AND ref IN (SELECT ref FROM up))
        SELECT count(*) FROM up""",
    "RUN_DELETE": """
        WITH d AS (DELETE FROM {s}.run_entries WHERE ref = %(ref)s)
        DELETE FROM {s}.runs WHERE ref = %(ref)s""",
}

_TEXTS = {
    "epoch": "is held by epoch {actual}, the writer holds epoch {expected}",
    "sequence": "has {actual} entries, the writer sent entry {expected}",
    "exists": "already exists (epoch {actual})",
    "missing": "does not exist (or expired)",
    "finished": "is finished; it takes no more entries",
}


def run_conflict(ref: str, reason: str, expected: int | None, actual: int | None) -> Exception:
    text = _TEXTS[reason].format(expected=expected, actual=actual)
    return RunConflictError(
        f"run {ref!r} {text}", ref=ref, reason=reason, expected=expected, actual=actual
    )


def _check(name: str, value: object, minimum: int | None = None) -> None:
    if minimum is None:
        if not isinstance(value, bytes):
            raise TypeError(f"{name} must be bytes, not {type(value).__name__}")
    elif not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, not {value!r}")


class RunsMixin:
    """RunStore for PostgresStore (which supplies the pool, queries, keys and clock)."""

    if TYPE_CHECKING:
        _password: str | None
        _q: dict[str, str]
        clock: Callable[[], float]

        def ref(self, scope: Scope) -> str: ...
        def _live_since(self, now: float) -> float: ...
        async def _pool(self) -> Pool: ...

    @staticmethod
    def _run_queries(quoted_schema: str) -> dict[str, str]:
        return {name: q.replace("{s}", quoted_schema) for name, q in _QUERIES.items()}

    def _run_args(self, scope: Scope, **more: Any) -> dict[str, Any]:
        now = self.clock()
        return {"ref": self.ref(scope), "now": now, "since": self._live_since(now), **more}

    async def _run_fetch(self, query: str, args: dict[str, Any]) -> list[tuple[Any, ...]]:
        pool = await self._pool()
        with translated(args["ref"], self._password):
            async with pool.connection() as conn:
                cursor = await conn.execute(self._q[query], args)
                return await cursor.fetchall() if cursor.description else []

    async def start_run(self, scope: Scope, header: bytes) -> int:
        _check("header", header)
        args = self._run_args(scope, header=header, epoch=FIRST_EPOCH)
        pool = await self._pool()
        with translated(args["ref"], self._password):
            async with pool.connection() as conn, conn.transaction():
                await conn.execute(self._q["RUN_DROP_EXPIRED"], args)
                cursor = await conn.execute(self._q["RUN_START"], args)
                started = await cursor.fetchall()
        if not started:
            state = await self._run_fetch("RUN_STATE", {**args, "seq": 0})
            raise run_conflict(args["ref"], "exists", None, int(state[0][0]) if state else None)
        return FIRST_EPOCH

    async def _refused(self, args: dict[str, Any], entry: bytes | None = None) -> None:
        """Why a fenced write changed nothing: raise the conflict (or return: a retry)."""
        ref, epoch, seq = args["ref"], args["epoch"], args.get("seq", 0)
        state = await self._run_fetch("RUN_STATE", {**args, "seq": seq})
        if not state:
            raise run_conflict(ref, "missing", epoch, None)
        current, stored, finished, at_seq = state[0]
        if current != epoch:
            raise run_conflict(ref, "epoch", epoch, int(current))
        if entry is None:
            return
        if finished:
            raise run_conflict(ref, "finished", epoch, int(current))
        if seq < stored and at_seq is not None and bytes(at_seq) == entry:
            return  # a retry of a committed append
        raise run_conflict(ref, "sequence", seq, int(stored))

    async def append_run(self, scope: Scope, epoch: int, seq: int, entry: bytes) -> None:
        _check("epoch", epoch, FIRST_EPOCH)
        _check("seq", seq, 0)
        _check("entry", entry)
        args = self._run_args(scope, epoch=epoch, seq=seq, entry=entry)
        if not await self._run_fetch("RUN_APPEND", args):
            await self._refused(args, entry)

    async def claim_run(self, scope: Scope, epoch: int) -> int:
        _check("epoch", epoch, FIRST_EPOCH)
        args = self._run_args(scope, epoch=epoch)
        rows = await self._run_fetch("RUN_CLAIM", args)
        if not rows:
            await self._refused(args)
            raise run_conflict(args["ref"], "epoch", epoch, None)  # claimed meanwhile
        return int(rows[0][0])

    async def load_run(self, scope: Scope) -> RunRecord | None:
        args = self._run_args(scope)
        rows = await self._run_fetch("RUN_LOAD", args)
        if not rows:
            return None
        epoch, header, outcome, updated_at, _ = rows[0]
        return RunRecord(
            ref=args["ref"],
            epoch=int(epoch),
            header=bytes(header),
            entries=[bytes(row[4]) for row in rows if row[4] is not None],
            outcome=None if outcome is None else bytes(outcome),
            updated_at=to_datetime(updated_at),
        )

    async def finish_run(
        self, scope: Scope, epoch: int, outcome: bytes, *, drop_entries: bool = False
    ) -> None:
        _check("epoch", epoch, FIRST_EPOCH)
        _check("outcome", outcome)
        args = self._run_args(scope, epoch=epoch, outcome=outcome, drop=bool(drop_entries))
        [(updated,)] = await self._run_fetch("RUN_FINISH", args)
        if not updated:
            await self._refused(args)
            raise run_conflict(args["ref"], "epoch", epoch, None)

    async def delete_run(self, scope: Scope) -> None:
        await self._run_fetch("RUN_DELETE", self._run_args(scope))

"""RedisStore's durable runs: the primitives of BaseRunStore over the store's connections.

A run is a hash (epoch, header, outcome, at) and a list of entries, under the hash tag
of its ref but with their own suffixes, so a run and a conversation with one id never
meet; a store-wide zset indexes runs by last write for prune. Each write is one
EVALSHA (see _scripts): the epoch and sequence checks and the write are atomic on
the server, an append pushes one element, and every write refreshes the run's TTL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from .._codec import to_datetime
from .._runs import BaseRunStore, Reason, run_conflict
from ..protocol import RunRecord, StoreDataError
from . import _scripts as scripts
from ._errors import translated

__all__ = ["RedisRuns", "RunScripts"]

_PAGE = 200  # index entries read per round trip when pruning


@dataclass(frozen=True)
class RunScripts:
    start: AsyncScript
    append: AsyncScript
    claim: AsyncScript
    finish: AsyncScript
    prune: AsyncScript

    @classmethod
    def of(cls, client: aioredis.Redis) -> RunScripts:
        return cls(
            AsyncScript(client, scripts.START_RUN),
            AsyncScript(client, scripts.APPEND_RUN),
            AsyncScript(client, scripts.CLAIM_RUN),
            AsyncScript(client, scripts.FINISH_RUN),
            AsyncScript(client, scripts.PRUNE_RUN),
        )


class RedisRuns(BaseRunStore):
    """The run primitives of RedisStore (which provides `prefix` and the connection)."""

    prefix: str

    def _run_connection(self) -> tuple[aioredis.Redis, RunScripts]:
        raise NotImplementedError

    def _ttl_ms(self) -> str:
        return "0" if self.ttl is None else str(max(1, round(self.ttl * 1000)))

    @property
    def run_index_key(self) -> str:
        """The sorted set of run refs by last write time."""
        return f"{self.prefix}:runs"

    def run_keys(self, ref: str) -> list[str]:
        """The keys of one run: hash, entries; then the run index."""
        base = f"{self.prefix}:{{{ref}}}"
        return [f"{base}:run", f"{base}:run-entries", self.run_index_key]

    def _scripts(self) -> RunScripts:
        return self._run_connection()[1]

    async def _script(
        self,
        ref: str,
        script: AsyncScript,
        args: list[Any],
        epoch: int | None,
        seq: int | None = None,
    ) -> int:
        """Run one run script; its number on 'ok', else the conflict it names."""
        with translated(ref):
            code, number = await script(self.run_keys(ref), [*args, self._ttl_ms(), ref])
        reason = code.decode() if isinstance(code, bytes) else str(code)
        if reason == "ok":
            return int(number)
        if reason == "missing":
            raise run_conflict(ref, "missing", epoch, None)
        if reason == "sequence":
            raise run_conflict(ref, "sequence", seq, int(number))
        if reason == "finished":
            raise run_conflict(ref, "finished", epoch, epoch)
        if reason in ("epoch", "exists"):
            raise run_conflict(ref, cast(Reason, reason), epoch, int(number))
        raise StoreDataError(  # not a reply our scripts give
            f"run {ref!r}: unexpected script reply {code!r}", ref=ref, position=None, reason="reply"
        )

    async def _start_run(self, ref: str, header: bytes, now: float) -> None:
        await self._script(ref, self._scripts().start, [header, repr(now)], None)

    async def _append_run(self, ref: str, epoch: int, seq: int, entry: bytes, now: float) -> None:
        await self._script(ref, self._scripts().append, [epoch, seq, entry, repr(now)], epoch, seq)

    async def _claim_run(self, ref: str, epoch: int, now: float) -> int:
        return await self._script(ref, self._scripts().claim, [epoch, repr(now)], epoch)

    async def _finish_run(
        self, ref: str, epoch: int, outcome: bytes, drop_entries: bool, now: float
    ) -> None:
        args = [epoch, outcome, "1" if drop_entries else "0", repr(now)]
        await self._script(ref, self._scripts().finish, args, epoch)

    async def _load_run(self, ref: str) -> RunRecord | None:
        run, entries, _ = self.run_keys(ref)
        client, _ = self._run_connection()
        with translated(ref):
            async with client.pipeline(transaction=True) as pipe:  # MULTI: read together
                pipe.hmget(run, "epoch", "header", "outcome", "at")
                pipe.lrange(entries, 0, -1)
                (epoch, header, outcome, at), stored = await pipe.execute()
        if epoch is None:
            return None
        try:
            return RunRecord(
                ref=ref,
                epoch=int(epoch),
                header=bytes(header),
                entries=list(stored),
                outcome=outcome,
                updated_at=to_datetime(float(at)),
            )
        except (TypeError, ValueError) as exc:
            raise StoreDataError(
                f"run {ref!r} has a malformed hash: {exc}", ref=ref, position=None, reason=str(exc)
            ) from None

    async def _delete_run(self, ref: str) -> None:
        run, entries, index = self.run_keys(ref)
        client, _ = self._run_connection()
        with translated(ref):
            async with client.pipeline(transaction=True) as pipe:
                pipe.delete(run, entries)
                pipe.zrem(index, ref)
                await pipe.execute()

    async def _prune_runs(self, cutoff: float) -> int:
        """Remove the runs last written before `cutoff` (or whose index entry outlived
        them by TTL); returns how many."""
        client, run_scripts = self._run_connection()
        removed = 0
        with translated(None):
            while True:
                page = cast(
                    list[bytes],
                    await client.zrangebyscore(
                        self.run_index_key, "-inf", f"({cutoff!r}", start=0, num=_PAGE
                    ),
                )
                if not page:
                    return removed
                async with client.pipeline(transaction=False) as pipe:
                    for member in page:
                        ref = member.decode()
                        await run_scripts.prune(
                            self.run_keys(ref), [ref, repr(cutoff)], client=pipe
                        )
                    removed += sum(await pipe.execute())

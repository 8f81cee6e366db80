"""Cached-value reads of one event loop's client, coalesced: the reads that arrive while
one is on its way go together in the next, so that many concurrent cache hits cost a
round trip each few, not each one (redis-py spends ~0.15 ms of CPU on one GET here,
more than the rest of a hit). A read is one script (`GET_CACHED`) whose reply is one
msgpack array: 16 values cost ~0.15 ms, against ~0.34 ms as an MGET."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import msgpack
import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from ._scripts import GET_CACHED

__all__ = ["CoalescedReads"]

_MAX_KEYS = 256  # keys per read


class CoalescedReads:
    """GET by key, many keys a read: one read in flight at a time, the next one takes
    every key asked meanwhile."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._script = AsyncScript(client, GET_CACHED)
        self._waiting: list[tuple[str, asyncio.Future[bytes | None]]] = []
        self._reading = False
        self._task: asyncio.Task[None] | None = None  # held: a task nobody holds may go

    async def get(self, key: str) -> bytes | None:
        future: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        self._waiting.append((key, future))
        if not self._reading:
            self._reading = True
            self._task = asyncio.get_running_loop().create_task(self._read())
        return await future

    async def _read(self) -> None:
        try:
            while self._waiting:
                batch = self._waiting[:_MAX_KEYS]
                del self._waiting[:_MAX_KEYS]
                try:
                    packed = await self._script([k for k, _ in batch])
                    values = cast(list[Any], msgpack.unpackb(packed, raw=True))
                except BaseException as exc:  # every waiter hears of it; nothing is lost
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                for (_, future), value in zip(batch, values, strict=True):
                    if not future.done():  # a waiter cancelled meanwhile
                        future.set_result(value if isinstance(value, bytes) else None)
        finally:
            self._reading = False
            for _, future in self._waiting:  # only if cancelled: no reader is left
                if not future.done():
                    future.set_exception(ConnectionError("the cache reader stopped"))
            self._waiting.clear()

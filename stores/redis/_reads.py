"""Cached-value reads of one event loop's client, coalesced: the GETs that arrive while
one MGET is on its way go together in the next, so that many concurrent cache hits cost
a round trip and a reply parse each few, not each one (redis-py spends ~0.15 ms of CPU
on one GET here, more than the rest of a hit)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import redis.asyncio as aioredis

__all__ = ["CoalescedReads"]

_MAX_KEYS = 256  # keys per MGET


class CoalescedReads:
    """GET by key through MGETs: one in flight at a time, the next one takes every key
    asked meanwhile."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
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
                    values = cast(list[Any], await self._client.mget([k for k, _ in batch]))
                except BaseException as exc:  # every waiter hears of it; nothing is lost
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                for (_, future), value in zip(batch, values, strict=True):
                    if not future.done():  # a waiter cancelled meanwhile
                        future.set_result(None if value is None else bytes(value))
        finally:
            self._reading = False
            for _, future in self._waiting:  # only if cancelled: no reader is left
                if not future.done():
                    future.set_exception(ConnectionError("the cache reader stopped"))
            self._waiting.clear()

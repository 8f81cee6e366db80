"""PostgresStore's plumbing: one psycopg pool per event loop, and error translation.

A psycopg async pool is bound to the loop that opened it (its connections' sockets, its
background tasks). The store keeps one per loop, opened on first use; `aclose()` closes
the calling loop's, and a loop that shuts down (asyncio.run) closes its own (_closer, as
RedisStore does with its clients).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import quote

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from .._closer import closer
from ..protocol import StoreDataError, StoreError, StoreUnavailableError

Pool = AsyncConnectionPool[psycopg.AsyncConnection[tuple[object, ...]]]


def dsn_password(dsn: str) -> str | None:
    """The password a DSN carries (URL or key=value form), to mask it wherever it shows."""
    try:
        password = conninfo_to_dict(dsn).get("password")
    except psycopg.ProgrammingError:
        return None
    return str(password) if password else None


def masked(text: str, password: str | None) -> str:
    if not password:
        return text
    return text.replace(password, "***").replace(quote(password, safe=""), "***")


@contextmanager
def translated(ref: str | None, password: str | None) -> Iterator[None]:
    """psycopg errors as store errors, the DSN's password masked in every message."""
    try:
        yield
    except PoolTimeout as exc:
        raise StoreUnavailableError(
            f"no PostgreSQL connection came free: {masked(str(exc), password)}", ref=ref
        ) from None
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        # Lost or refused connections, shutdowns, serialisation failures, deadlocks.
        raise StoreUnavailableError(
            f"PostgreSQL is unavailable: {masked(str(exc), password)}", ref=ref
        ) from None
    except (pg_errors.InsufficientPrivilege, pg_errors.UndefinedTable) as exc:
        raise StoreDataError(
            f"PostgreSQL refused an operation: {masked(str(exc), password)}",
            ref=ref,
            position=None,
            reason=type(exc).__name__,
        ) from None
    except psycopg.Error as exc:
        raise StoreDataError(
            f"PostgreSQL refused an operation on {ref!r}: {masked(str(exc), password)}",
            ref=ref,
            position=None,
            reason=type(exc).__name__,
        ) from None


@dataclass
class LoopPool:
    pool: Pool
    closer: AsyncGenerator[None, None]
    ready: bool = False
    opening: asyncio.Lock = field(default_factory=asyncio.Lock)


class Pools:
    """The pools of one store, one per event loop."""

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int,
        max_size: int,
        timeout: float,
        prepare: Callable[[psycopg.AsyncConnection[tuple[object, ...]]], Awaitable[None]],
    ) -> None:
        self.dsn = dsn
        self.min_size = min_size
        self.max_size = max_size
        self.timeout = timeout
        self.prepare = prepare  # run once per loop, on the first connection (schema)
        self.by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopPool] = (
            weakref.WeakKeyDictionary()
        )

    async def get(self) -> Pool:
        loop = asyncio.get_running_loop()
        entry = self.by_loop.get(loop)
        if entry is not None and entry.ready:
            return entry.pool
        if entry is None:
            entry = self._new(loop)
        async with entry.opening:
            if not entry.ready:
                await entry.pool.open(wait=False)
                async with entry.pool.connection() as conn:
                    await self.prepare(conn)
                entry.ready = True
        return entry.pool

    def _new(self, loop: asyncio.AbstractEventLoop) -> LoopPool:
        pool: Pool = AsyncConnectionPool(
            self.dsn,
            min_size=self.min_size,
            max_size=self.max_size,
            timeout=self.timeout,
            open=False,
            # Autocommit: each write is one function call, its own transaction; prepared
            # at once (a store sends the same few statements all its life).
            kwargs={"autocommit": True, "prepare_threshold": 0},
        )
        by_loop = self.by_loop

        def forget() -> None:
            if by_loop.get(loop) is entry:
                del by_loop[loop]

        entry = LoopPool(pool, closer(pool.close, forget))
        by_loop[loop] = entry
        return entry

    async def close(self) -> None:
        entry = self.by_loop.pop(asyncio.get_running_loop(), None)
        if entry is not None:  # gone first: an operation meanwhile opens a new one
            await entry.closer.aclose()


def schema_error(schema: str, found: list[int], supported: int) -> StoreError:
    return StoreDataError(
        f"PostgreSQL schema {schema!r} holds raygent schema version {found}, this raygent"
        f" reads version {supported} (no migration exists; upgrade raygent or use another"
        " schema)",
        ref=None,
        position=None,
        reason="schema_version",
        found=found,
        supported=supported,
    )

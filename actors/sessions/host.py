"""The session host: the leases and cached histories of many conversations, one process.

`SessionHost` is a plain class; `sessions.persistence` makes a fixed pool of them
named async Ray actors (`raygent-sessions-<i>`), each hosting every conversation routed
to it. It is usable in-process too, which is how its leases and cache are unit-tested.

Per conversation it keeps a FIFO gate (only while a run holds or waits for it) and,
least recently used first out, a cached copy of the history. The store stays the source
of truth: runs write to it themselves, fenced by `expected_position`, and hand back
what they appended when they release their lease; the cache is extended with it, or
dropped whenever it might differ from the store (a conflict, a compaction, an unknown
outcome, a batch that wrote around the hosts).

Messages cross the Ray boundary, and sit in the cache, as their JSON (one schema, encoded
and decoded in Rust, a few times cheaper than pickling the models): a cached
conversation costs about its JSON size, and a history is sent without re-encoding.

Errors go back as values (a `RaygentError` returned, never raised): the caller gets the
typed error itself, and Ray logs no "error in task" for an ordinary store error.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import os
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from raygent.backend import RaygentError, redacting_logger
from raygent.stores import Scope, Store

from .wire import LeaseExpiredError, SessionHostError, encode_messages

__all__ = ["Granted", "SessionHost"]

log = redacting_logger("raygent.sessions")

Granted = tuple[str, bytes]  # (lease id, the history the run starts from, as JSON)
_Key = tuple[str, str]  # (store key, conversation ref)
_EMPTY = b"[]"


@dataclass(eq=False)
class _Store:
    """A store known to this host, and the bound on its calls in flight from here."""

    store: Store
    slots: asyncio.Semaphore

    def fresh_until(self) -> float:
        """A store whose conversations expire (`ttl` after their last write) may drop
        one the cache still holds: a cached copy is trusted for one ttl at most."""
        ttl = getattr(self.store, "ttl", None)
        return time.monotonic() + ttl if ttl else float("inf")


@dataclass(eq=False)
class _Gate:
    """Runs holding or waiting for one conversation; dropped when there are none."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0
    holder: _Lease | None = None


@dataclass(eq=False)
class _Lease:
    lease_id: str
    key: _Key
    store: _Store
    scope: Scope
    run_id: str
    position: int  # the conversation's length when the lease was granted
    timeout: float
    deadline: float
    timer: asyncio.TimerHandle | None = None

    def renew(self) -> None:
        self.deadline = time.monotonic() + self.timeout


@dataclass(eq=False)
class _Cached:
    """A conversation's history as JSON arrays of messages (one per write until read)."""

    chunks: list[bytes]
    count: int
    size: int
    fresh_until: float

    def joined(self) -> bytes:
        if len(self.chunks) != 1:
            inner = [chunk[1:-1] for chunk in self.chunks if chunk != _EMPTY]
            self.chunks = [b"[" + b",".join(inner) + b"]"]
            self.size = len(self.chunks[0])
        return self.chunks[0]


class SessionHost:
    """Serialises the runs of the conversations routed here and caches their histories.

    - `acquire` waits FIFO (in arrival order at this host) behind the runs holding or
      waiting for the conversation, then grants a lease and the history.
    - A lease is renewed by each call made with it; one not renewed for its
      `lease_timeout` expires (the next run goes ahead; its later calls are refused with
      `LeaseExpiredError`), so a dead driver blocks a session for one timeout at most.
    - A lease from an earlier incarnation of the host (it died and Ray restarted it)
      is refused with `SessionHostError`.
    - At most `max_cached` conversations and `max_cached_bytes` of their JSON are cached
      (0 disables the cache: every acquire loads from the store).
    - At most `store_concurrency` calls per store are in flight from this host (one
      host gathers the writes of many drivers; a client's connection pool is finite).
    """

    def __init__(
        self,
        max_cached: int = 10_000,
        max_cached_bytes: int = 256 * 2**20,
        store_concurrency: int = 64,
    ) -> None:
        self._incarnation = uuid.uuid4().hex[:12]
        self._serial = itertools.count(1)
        self._max_cached = max_cached
        self._max_cached_bytes = max_cached_bytes
        self._store_concurrency = store_concurrency
        self._stores: dict[str, _Store] = {}
        self._cache: OrderedDict[_Key, _Cached] = OrderedDict()
        self._cached_bytes = 0
        self._gates: dict[_Key, _Gate] = {}
        self._leases: dict[str, _Lease] = {}
        self._expired = 0

    async def acquire(
        self,
        store_key: str,
        scope: Scope,
        run_id: str,
        lease_timeout: float,
        store: Store | None = None,
    ) -> Granted | RaygentError | None:
        """Wait for the conversation, then lease it. None: `store_key` is not known here
        (first use, or the host restarted): call again with `store`."""
        if store is not None and store_key not in self._stores:
            self._stores[store_key] = _Store(store, asyncio.Semaphore(self._store_concurrency))
        known = self._stores.get(store_key)
        if known is None:
            return None
        key = (store_key, known.store.ref(scope))
        gate = self._gates.get(key)
        if gate is None:
            gate = self._gates[key] = _Gate()
        elif gate.holder is not None and gate.holder.run_id == run_id:
            return await self._again(gate.holder)
        gate.users += 1
        try:
            await gate.lock.acquire()
        except BaseException:
            self._leave(gate, key)
            raise
        try:
            history, count = await self._history(known, key, scope)
        except BaseException as exc:
            gate.lock.release()
            self._leave(gate, key)
            if isinstance(exc, RaygentError):
                return exc
            raise
        lease = _Lease(
            lease_id=f"{self._incarnation}-{next(self._serial)}",
            key=key,
            store=known,
            scope=scope,
            run_id=run_id,
            position=count,
            timeout=lease_timeout,
            deadline=time.monotonic() + lease_timeout,
        )
        self._leases[lease.lease_id] = lease
        gate.holder = lease
        lease.timer = asyncio.get_running_loop().call_later(lease_timeout, self._check, lease)
        return lease.lease_id, history

    async def renew(self, lease_id: str) -> RaygentError | None:
        """Keep a lease alive while its run works without writing (a long model call)."""
        lease = self._lease(lease_id)
        return lease if isinstance(lease, RaygentError) else None

    async def release(
        self, lease_id: str, appended: bytes | None, position: int | None
    ) -> RaygentError | None:
        """End a lease (the next run goes ahead). `appended`: the messages (JSON) the
        run wrote, which moved the conversation to `position`; the cached copy is
        extended with them when it is the one the run started from, else dropped
        (None: the run cannot say, as after a conflict or a compaction). An unknown or
        expired lease is refused as a value (what the run wrote is in the store)."""
        lease = self._lease(lease_id)
        if isinstance(lease, RaygentError):
            return lease
        if appended is None or position is None:
            self._forget(lease.key)
        elif position != lease.position:
            self._extend(lease, appended, position)
        self._free(lease)
        return None

    async def stats(self) -> dict[str, Any]:
        """What this host holds: cached conversations and bytes, leases, gates, RSS."""
        return {
            "pid": os.getpid(),
            "incarnation": self._incarnation,
            "cached_sessions": len(self._cache),
            "cached_bytes": self._cached_bytes,
            "leases": len(self._leases),
            "gates": len(self._gates),
            "stores": len(self._stores),
            "expired_leases": self._expired,
            "rss_bytes": _rss(),
        }

    async def forget(self, store_key: str, ref: str) -> None:
        """Drop a conversation's cached history (it was changed around the hosts)."""
        self._forget((store_key, ref))

    async def forget_all(self, store_key: str, refs: list[str]) -> None:
        """`forget` many (a batch on runners wrote them)."""
        for ref in refs:
            self._forget((store_key, ref))

    async def _again(self, lease: _Lease) -> Granted | RaygentError:
        """The same run asking again (its first answer was lost on the way): it already
        holds the lease."""
        lease.renew()
        try:
            history, _ = await self._history(lease.store, lease.key, lease.scope)
        except RaygentError as exc:
            return exc
        return lease.lease_id, history

    async def _history(self, known: _Store, key: _Key, scope: Scope) -> tuple[bytes, int]:
        cached = self._cache.get(key)
        if cached is not None and cached.fresh_until <= time.monotonic():
            self._forget(key)
            cached = None
        if cached is not None:
            self._cache.move_to_end(key)
            before = cached.size
            history = cached.joined()
            self._cached_bytes += len(history) - before
            return history, cached.count
        async with known.slots:
            messages = await known.store.load(scope)
        history = encode_messages(messages)
        self._remember(key, _Cached([history], len(messages), len(history), known.fresh_until()))
        return history, len(messages)

    def _lease(self, lease_id: str) -> _Lease | RaygentError:
        lease = self._leases.get(lease_id)
        if lease is not None:
            lease.renew()
            return lease
        if not lease_id.startswith(self._incarnation + "-"):
            return SessionHostError(
                "the session host restarted since this run took its lease; the run's "
                "later writes are refused (what it wrote before is stored)",
                lease_id=lease_id,
            )
        return LeaseExpiredError(
            "this run's session lease expired (not renewed within its lease_timeout) or "
            "was released; another run may have gone ahead",
            lease_id=lease_id,
        )

    def _check(self, lease: _Lease) -> None:
        """The lease's timer: expire it, or look again at its (renewed) deadline."""
        if self._leases.get(lease.lease_id) is not lease:
            return
        now = time.monotonic()
        if now < lease.deadline:
            wait = lease.deadline - now
            lease.timer = asyncio.get_running_loop().call_later(wait, self._check, lease)
            return
        log.warning(
            "session lease %s of run %s expired after %.1f s without renewal",
            lease.lease_id,
            lease.run_id,
            lease.timeout,
        )
        self._expired += 1
        self._free(lease)

    def _free(self, lease: _Lease) -> None:
        if self._leases.pop(lease.lease_id, None) is None:
            return
        if lease.timer is not None:
            lease.timer.cancel()
        gate = self._gates[lease.key]
        gate.holder = None
        gate.lock.release()
        self._leave(gate, lease.key)

    def _leave(self, gate: _Gate, key: _Key) -> None:
        gate.users -= 1
        if not gate.users and self._gates.get(key) is gate:
            del self._gates[key]

    def _remember(self, key: _Key, cached: _Cached) -> None:
        self._forget(key)
        if not self._max_cached or cached.size > self._max_cached_bytes:
            return
        self._cache[key] = cached
        self._cached_bytes += cached.size
        self._evict()

    def _extend(self, lease: _Lease, payload: bytes, position: int) -> None:
        key = lease.key
        cached = self._cache.get(key)
        if cached is None:
            return
        if cached.count != lease.position:
            self._forget(key)  # the store moved in a way this copy did not see
            return
        cached.chunks.append(payload)
        cached.count = position
        cached.size += len(payload)
        cached.fresh_until = lease.store.fresh_until()
        self._cached_bytes += len(payload)
        self._cache.move_to_end(key)
        self._evict()

    def _forget(self, key: _Key) -> None:
        cached = self._cache.pop(key, None)
        if cached is not None:
            self._cached_bytes -= cached.size

    def _evict(self) -> None:
        while self._cache and (
            len(self._cache) > self._max_cached or self._cached_bytes > self._max_cached_bytes
        ):
            _, cached = self._cache.popitem(last=False)
            self._cached_bytes -= cached.size


def _rss() -> int | None:
    try:
        psutil: Any = importlib.import_module("psutil")
    except ImportError:  # psutil comes with ray[default]; a bare ray has none
        return None
    return int(psutil.Process().memory_info().rss)

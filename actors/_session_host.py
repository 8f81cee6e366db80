"""The session host: the leases and cached histories of many conversations, one process.

`SessionHost` is a plain class; `raygent.actors.sessions` makes a fixed pool of them
named async Ray actors (`raygent-sessions-<i>`), each hosting every conversation routed
to it. It is usable in-process too, which is how its leases and cache are unit-tested.

Per conversation it keeps a FIFO gate (only while a run holds or waits for it) and,
least recently used first out, a cached copy of the history. The store stays the source
of truth: every append goes to the store at once, fenced by `expected_position`, and the
cache is dropped whenever it might differ from the store (a conflict, a failed write).

Messages cross the Ray boundary, and sit in the cache, as their JSON (one schema, encoded
and decoded in Rust, a few times cheaper than pickling the models): a cached
conversation costs about its JSON size, and a history is sent without re-encoding.

Errors go back as values (a `RaygentError` returned, never raised), as the gateway does:
the caller gets the typed error itself, and Ray logs no "error in task" for an ordinary
position conflict.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import logging
import os
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._core import RaygentError
from .sessions import LeaseExpiredError, SessionHostError, encode_messages

if TYPE_CHECKING:
    from runtime.messages import Message, messages_from_json
    from stores.protocol import AppendResult, CompactingStore, Scope, Store
else:
    from raygent.messages import Message, messages_from_json
    from raygent.stores import AppendResult, CompactingStore, Scope, Store

__all__ = ["Granted", "SessionHost"]

log = logging.getLogger("raygent.sessions")

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
    position: int  # the conversation's length as this lease knows it: the fence
    timeout: float
    deadline: float
    busy: int = 0  # store calls in flight: a busy lease neither expires nor frees
    released: bool = False
    timer: asyncio.TimerHandle | None = None
    # The last snapshot read with this lease (compaction): (revision, stored history).
    seen: tuple[int, list[Message]] | None = None

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

    async def append(self, lease_id: str, turn: int, payload: bytes) -> int | RaygentError:
        """Write one batch (JSON) through to the store; returns the new length."""
        lease = self._lease(lease_id)
        if isinstance(lease, RaygentError):
            return lease
        lease.busy += 1
        try:
            messages = messages_from_json(payload)
            async with lease.store.slots:
                result = await lease.store.store.append(
                    lease.scope, lease.run_id, turn, messages, expected_position=lease.position
                )
        except BaseException as exc:
            # A conflict, or a write whose outcome is unknown: reload on the next acquire.
            self._forget(lease.key)
            if isinstance(exc, RaygentError):
                return exc
            raise
        finally:
            self._done(lease)
        self._extend(lease, result, payload)
        lease.position = result.first_position + result.count
        return lease.position

    async def record_error(
        self, lease_id: str, error: dict[str, Any], payload: bytes
    ) -> RaygentError | None:
        """Keep a failure beside the history (never part of it)."""
        lease = self._lease(lease_id)
        if isinstance(lease, RaygentError):
            return lease
        lease.busy += 1
        try:
            messages = messages_from_json(payload)
            async with lease.store.slots:
                await lease.store.store.record_error(lease.scope, lease.run_id, error, messages)
        except RaygentError as exc:
            return exc
        finally:
            self._done(lease)
        return None

    async def snapshot(self, lease_id: str) -> tuple[int, bytes] | RaygentError:
        """The stored history (JSON) and its revision, read from the store (compaction)."""
        lease = self._lease(lease_id)
        if isinstance(lease, RaygentError):
            return lease
        store = _compacting(lease)
        lease.busy += 1
        try:
            async with lease.store.slots:
                snapshot = await store.snapshot(lease.scope)
        except RaygentError as exc:
            return exc
        finally:
            self._done(lease)
        lease.seen = (snapshot.revision, snapshot.messages)
        return snapshot.revision, encode_messages(snapshot.messages)

    async def replace_prefix(
        self, lease_id: str, revision: int, count: int, payload: bytes
    ) -> bool | RaygentError:
        """Replace the stored prefix of `count` messages by `payload` (JSON) if the store
        is still at `revision`: True committed, False a conflict (another writer moved
        it first; the caller may read a new snapshot and try again). A commit moves the
        lease's fence by what the replacement changed, as the local lease does, so the
        run's next append lines up (and a write by someone else still conflicts), and
        the cached history becomes the compacted one."""
        lease = self._lease(lease_id)
        if isinstance(lease, RaygentError):
            return lease
        store = _compacting(lease)
        lease.busy += 1
        try:
            replacement = messages_from_json(payload)
            async with lease.store.slots:
                outcome = await store.replace_prefix(
                    lease.scope, revision, count, replacement, lease.run_id
                )
        except BaseException as exc:
            self._forget(lease.key)  # the outcome is unknown: reload on the next acquire
            if isinstance(exc, RaygentError):
                return exc
            raise
        finally:
            self._done(lease)
        seen, lease.seen = lease.seen, None
        if outcome != "committed":
            self._forget(lease.key)  # the store moved in a way the cache did not see
            return False
        lease.position += len(replacement) - count
        if seen is None or seen[0] != revision:
            self._forget(lease.key)  # committed on a revision this host did not read
        else:
            # The store was at `revision`, which is what `seen` holds: now it is this.
            compacted = [*replacement, *seen[1][count:]]
            history = encode_messages(compacted)
            fresh = lease.store.fresh_until()
            self._remember(lease.key, _Cached([history], len(compacted), len(history), fresh))
        return True

    async def renew(self, lease_id: str) -> RaygentError | None:
        """Keep a lease alive while its run works without writing (a long model call)."""
        lease = self._lease(lease_id)
        return lease if isinstance(lease, RaygentError) else None

    async def release(self, lease_id: str) -> None:
        """End a lease (the next run goes ahead); unknown or expired leases are ignored.
        A store call still in flight with the lease finishes first."""
        lease = self._leases.get(lease_id)
        if lease is not None:
            lease.released = True
            if not lease.busy:
                self._free(lease)

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
        if lease is not None and not lease.released:
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

    def _done(self, lease: _Lease) -> None:
        lease.busy -= 1
        lease.renew()
        if lease.released and not lease.busy:
            self._free(lease)

    def _check(self, lease: _Lease) -> None:
        """The lease's timer: expire it, or look again at its (renewed) deadline."""
        if self._leases.get(lease.lease_id) is not lease:
            return
        now = time.monotonic()
        if lease.busy or now < lease.deadline:
            wait = lease.timeout if lease.busy else lease.deadline - now
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

    def _extend(self, lease: _Lease, result: AppendResult, payload: bytes) -> None:
        key = lease.key
        cached = self._cache.get(key)
        if cached is None:
            return
        if result.duplicate or cached.count != result.first_position:
            self._forget(key)  # the store moved in a way this copy did not see
            return
        cached.chunks.append(payload)
        cached.count += result.count
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


def _compacting(lease: _Lease) -> CompactingStore:
    store = lease.store.store
    if not isinstance(store, CompactingStore):  # the lease says so: it is not asked
        raise TypeError(f"{type(store).__name__} cannot replace a prefix (compaction)")
    return store


def _rss() -> int | None:
    try:
        psutil: Any = importlib.import_module("psutil")
    except ImportError:  # psutil comes with ray[default]; a bare ray has none
        return None
    return int(psutil.Process().memory_info().rss)

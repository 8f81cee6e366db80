"""Session persistence on Ray: conversations served by a fixed pool of session hosts.

A session is a *logical* actor: a fixed pool of async actors (`raygent-sessions-<i>` in
the backend's namespace) hosts them all, each conversation on the host picked by a
stable hash of (store, conversation ref), so every process of the cluster routes it to
the same host. The host serialises the conversation's runs (FIFO leases) and caches its
history; the store stays the source of truth.

A run costs two host calls: one to open (the lease and the history), one to close (the
lease back, with what the run appended for the host's copy). In between the run writes
each batch of its save policy to the store itself, fenced by its position
(`lease.HostLease`). Histories cross as their JSON. Ray does not keep the order
of one caller's calls to an async actor, so runs from one process first queue on a
per-process FIFO lock for the conversation: runs from one driver go in arrival order,
runs from several drivers are mutually exclusive at the host.

A batch on runners does without hosts: its items are routed to runners by session, and a
runner serialises its sessions itself (`in_batch_runner`), writing to the store
with the same fence. The driver tells the hosts to forget what the batch changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import os
import pickle
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import ray
import ray.cloudpickle
from ray.exceptions import ActorDiedError, RayActorError, RayTaskError

from raygent.backend import (
    LocalSessions,
    Memory,
    Message,
    RaygentError,
    SessionLease,
    messages_from_json,
    redacting_logger,
)
from raygent.stores import InMemoryStore, Scope, SQLiteStore, Store

from .._options import RayOptions
from .._ray import in_batch_runner, job_id, named_actor, spawn
from .lease import HostLease, unavailable
from .wire import (
    LeaseExpiredError,
    SessionHostError,
    encode_messages,
    host_names,
    route,
)

__all__ = [
    "LeaseExpiredError",
    "RaySessions",
    "SessionHostError",
    "encode_messages",
    "host_names",
    "route",
    "store_identity",
]

log = redacting_logger("raygent.sessions")
_dumps: Callable[[Any], bytes] = ray.cloudpickle.dumps

FORGET_CHUNK = 10_000  # conversation refs per `forget_all` call: a bounded message
# An acquire that meets a host restarting (killed, its node lost) tries again this often.
ACQUIRE_ATTEMPTS = 5


def store_identity(store: Store) -> tuple[str, Store] | None:
    """A store's key (a hash of its pickled configuration: equal configurations in any
    process get the same key) and the copy sent to hosts; None for a store served in
    this process (see `RaySessions`). A relative SQLite path is made absolute here: it
    means this process's working directory, not a host's."""
    try:
        return _identities[store]
    except (KeyError, TypeError):
        pass
    found = _identify(store)
    # Stores that cannot be weakly referenced are looked at on every use.
    with contextlib.suppress(TypeError):
        _identities[store] = found
    return found


def _identify(store: Store) -> tuple[str, Store] | None:
    if isinstance(store, InMemoryStore) or (
        isinstance(store, SQLiteStore) and store.path == ":memory:"
    ):
        return None  # its data lives in this process: a host would get a copy
    shipped = store
    if isinstance(store, SQLiteStore) and not os.path.isabs(store.path):
        shipped = copy.copy(store)
        shipped.path = os.path.abspath(store.path)
    try:
        pickled = _dumps(shipped)
        pickle.loads(pickled)  # what a host will do with it
    except Exception as exc:
        log.warning(
            "%s cannot be sent to the session hosts (%s: %s); its sessions are served "
            "in this process",
            type(store).__name__,
            type(exc).__name__,
            exc,
        )
        return None
    return hashlib.sha256(pickled).hexdigest()[:16], shipped


# Per process: handles, stores known to hosts, store identities, FIFO locks.
_handles: dict[tuple[str, str, str], Any] = {}  # (job, namespace, name) -> handle
_registered: set[tuple[str, str, str, str]] = set()  # (job, namespace, name, store key)
_identities: weakref.WeakKeyDictionary[Any, tuple[str, Store] | None] = weakref.WeakKeyDictionary()
_locks: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock]
] = weakref.WeakKeyDictionary()
_local = LocalSessions()


def _host_class() -> type:
    from .host import SessionHost

    return SessionHost


class RaySessions:
    """`SessionPersistence` on Ray session hosts.

    - `options`: the namespace the hosts live in and whether they are `detached` (they
      outlive the driver, for long-lived services and notebooks; by default they end
      with the job of the process that created them, so start them from the driver:
      `start()`).
    - `hosts`: the pool size; every process sharing the sessions must use the same.
    - `lease_timeout`: seconds a lease lives without a call made with it (the lease is
      kept alive while its run works, so only a dead or stalled driver loses it).
    - `max_cached` / `max_cached_bytes`: each host's cache bound in conversations and in
      bytes of their JSON (least recently used go first; 0 conversations disables the
      cache); `store_concurrency`: each host's bound on calls in flight per store. A
      host that already runs keeps the bounds it was started with.

    Stores must be reachable from every host: Redis, or an SQLite file on this machine.
    In-memory stores (`InMemoryStore`, SQLite `:memory:`) are per process (a host would
    get a copy), so their sessions are served in this process, as on the local backend;
    so are those of a store that cannot be pickled (a warning says so).

    Writers that bypass the hosts (`session.clear()`, the local backend) make the next
    append of a cached conversation fail once with `PositionConflictError` (the fence
    held); the host then reloads it. Call `forget(memory, scope)` after such a change,
    or use `max_cached=0` where that is common. A store with a `ttl` is trusted in the
    cache for one ttl at most.
    """

    def __init__(
        self,
        options: RayOptions | None = None,
        *,
        hosts: int = 4,
        lease_timeout: float = 600.0,
        max_cached: int = 10_000,
        max_cached_bytes: int = 256 * 2**20,
        store_concurrency: int = 64,
    ) -> None:
        if hosts < 1:
            raise ValueError(f"hosts must be >= 1, not {hosts}")
        if lease_timeout <= 0:
            raise ValueError(f"lease_timeout must be positive seconds, not {lease_timeout}")
        if max_cached < 0 or max_cached_bytes < 0:
            raise ValueError("max_cached and max_cached_bytes must be >= 0")
        if store_concurrency < 1:
            raise ValueError(f"store_concurrency must be >= 1, not {store_concurrency}")
        self.options = options or RayOptions()
        self.hosts = hosts
        self.lease_timeout = lease_timeout
        self.max_cached = max_cached
        self.max_cached_bytes = max_cached_bytes
        self.store_concurrency = store_concurrency

    def __repr__(self) -> str:
        return (
            f"RaySessions(namespace={self.options.namespace!r}, hosts={self.hosts}, "
            f"lease_timeout={self.lease_timeout})"
        )

    def start(self) -> list[Any]:
        """Create (or find) every host now; returns their handles."""
        return [self._handle(name) for name in host_names(self.hosts)]

    async def stats(self) -> list[dict[str, Any]]:
        """Each host's `stats()`: cached sessions and bytes, leases, gates, RSS."""
        return list(await asyncio.gather(*(h.stats.remote() for h in self.start())))

    async def forget(self, memory: Memory, scope: Scope) -> None:
        """Drop the hosts' cached copy of a conversation changed around them (cleared,
        compacted, written by another backend), so the next run loads it from the store."""
        found = store_identity(memory.store)
        if found is None:
            return
        key, _ = found
        ref = memory.store.ref(scope)
        name = host_names(self.hosts)[route(key, ref, self.hosts)]
        try:
            await self._handle(name).forget.remote(key, ref)
        except RayActorError as exc:
            _lost(name, exc)  # a host that died has forgotten everything anyway

    async def forget_all(self, memory: Memory, scopes: Iterable[Scope]) -> None:
        """`forget` many conversations (a batch on runners wrote them around the hosts),
        in a few calls per host that exists; hosts never started cache nothing, and
        when none runs (a batch's usual case) nothing is even routed."""
        found = store_identity(memory.store)
        if found is None:
            return
        key, _ = found
        self.options.connect()
        live = {}
        for name in host_names(self.hosts):
            with contextlib.suppress(ValueError):  # never started
                live[name] = ray.get_actor(name, namespace=self.options.namespace)
        if not live:
            return
        names = host_names(self.hosts)
        refs: dict[str, list[str]] = {name: [] for name in live}
        for scope in scopes:
            ref = memory.store.ref(scope)
            held = refs.get(names[route(key, ref, self.hosts)])
            if held is not None:
                held.append(ref)
        for name, held in refs.items():
            for start in range(0, len(held), FORGET_CHUNK):
                with contextlib.suppress(RayActorError):
                    await live[name].forget_all.remote(key, held[start : start + FORGET_CHUNK])

    async def acquire(self, memory: Memory, scope: Scope, run_id: str) -> SessionLease:
        store = memory.store
        found = store_identity(store)
        if found is None or in_batch_runner.get():
            return await _local.acquire(memory, scope, run_id)
        key, shipped = found
        ref = store.ref(scope)
        lock = _lock((key, ref))
        await lock.acquire()
        try:
            name = host_names(self.hosts)[route(key, ref, self.hosts)]
            handle, lease_id, history = await self._acquire(name, key, shipped, scope, run_id)
        except BaseException:
            lock.release()
            raise
        lease = HostLease(
            handle,
            name,
            lease_id,
            history,
            store,
            scope,
            run_id,
            lock,
            self.lease_timeout,
            time.monotonic(),
        )
        lease.keep_alive()
        return lease

    async def _acquire(
        self, name: str, key: str, store: Store, scope: Scope, run_id: str
    ) -> tuple[Any, str, list[Message]]:
        for attempt in range(ACQUIRE_ATTEMPTS):
            handle = self._handle(name)
            try:
                lease_id, history = await self._ask(handle, name, key, store, scope, run_id)
            except RayActorError as exc:
                _lost(name, exc)
                if attempt + 1 == ACQUIRE_ATTEMPTS:
                    raise unavailable(name, exc) from None
                await asyncio.sleep(0.1 * 2**attempt)
            else:
                return handle, lease_id, history
        raise AssertionError("unreachable")

    async def _ask(
        self, handle: Any, name: str, key: str, store: Store, scope: Scope, run_id: str
    ) -> tuple[str, list[Message]]:
        """One acquire; the store goes along only when the host does not know it yet."""
        known = (job_id(), self.options.namespace, name, key)
        sends: tuple[Store | None, ...] = (None, store) if known in _registered else (store,)
        for sent in sends:
            ref = handle.acquire.remote(key, scope, run_id, self.lease_timeout, sent)
            result = await _granted(ref, handle)
            if result is None:
                continue  # the host restarted and forgot the store: send it along
            _registered.add(known)
            if isinstance(result, RaygentError):
                raise result
            lease_id, history = result
            return str(lease_id), messages_from_json(history)
        raise SessionHostError(f"session host {name} does not take the store", host=name)

    def _handle(self, name: str) -> Any:
        self.options.connect()
        o = self.options
        cache_key = (job_id(), o.namespace, name)
        handle = _handles.get(cache_key)
        if handle is None:
            handle = _handles[cache_key] = named_actor(
                _host_class(),
                name,
                o.namespace,
                self.max_cached,
                self.max_cached_bytes,
                self.store_concurrency,
                detached=o.detached,
            )
        return handle


def _lock(key: tuple[str, str]) -> asyncio.Lock:
    """This process's FIFO lock for a conversation (one per event loop: a lock is bound
    to the loop it first waits in); dropped when no run holds or waits for it."""
    per_loop = _locks.get(asyncio.get_running_loop())
    if per_loop is None:
        per_loop = _locks[asyncio.get_running_loop()] = weakref.WeakValueDictionary()
    lock = per_loop.get(key)
    if lock is None:
        lock = per_loop[key] = asyncio.Lock()
    return lock


async def _granted(ref: Any, handle: Any) -> Any:
    """Await an acquire. If the waiting run is cancelled, the host may still grant the
    lease later: it is then released at once, instead of blocking the session until it
    expires."""
    pending = spawn(_awaited(ref))
    try:
        return await asyncio.shield(pending)
    except asyncio.CancelledError:
        pending.add_done_callback(lambda done: _release_granted(done, handle))
        raise
    except RayTaskError as exc:
        raise _cause(exc) from None


async def _awaited(ref: Any) -> Any:
    return await ref


def _release_granted(done: asyncio.Task[Any], handle: Any) -> None:
    if not done.cancelled() and done.exception() is None:
        result = done.result()
        if isinstance(result, tuple):
            handle.release.remote(result[0], None, None)


def _lost(name: str, exc: RayActorError) -> None:
    if isinstance(exc, ActorDiedError):
        # Restarting, or gone for good (its owner's job ended): look it up (or create it)
        # anew on the next call.
        for cache_key in [k for k in _handles if k[2] == name]:
            del _handles[cache_key]


def _cause(exc: RayTaskError) -> Exception:
    """The exception a host call raised (store errors come back as values; this is for
    the rest: a message the store cannot take, a bug)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, Exception) else exc

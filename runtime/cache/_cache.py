"""`ResponseCache`: the options, the process's side of a cache (its store, its flights),
and `CachedAccess`, the model access that consults it."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import uuid
import weakref
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from ..abort import AbortSignal, abortable
from ..errors import InvalidOptionsError
from ..messages import Message
from ..models.contract import (
    CompositeModel,
    Done,
    Model,
    ModelOptions,
    ModelResponse,
    StreamChunk,
    as_composite,
)
from ..seams.contract import ModelAccess
from ..seams.link import Link, closing_stream, split, split_stream
from ..seams.request import ModelRequest
from ..stores import CacheStore, InMemoryStore
from ._entry import Entry, storable, with_fields
from ._key import request_key

__all__ = ["CachedAccess", "ResponseCache"]

log = logging.getLogger("raygent.cache")


class _Unavailable:
    """What a lookup gives when the store failed: the request is sent as a miss, and its
    trip says `cache="unavailable"` (so a batch counts it, in whichever process ran it)."""


UNAVAILABLE = _Unavailable()

# The in-memory stores of caches made without a store, by the cache's token: every copy
# of one cache in this process (an agent's and a batch's, unpickled apart) shares one,
# for as long as a copy lives.
_MEMORY: weakref.WeakValueDictionary[str, InMemoryStore] = weakref.WeakValueDictionary()
_MEMORY_LOCK = threading.Lock()


def _memory(token: str) -> InMemoryStore:
    with _MEMORY_LOCK:
        store = _MEMORY.get(token)
        if store is None:
            store = _MEMORY[token] = InMemoryStore()
        return store


class ResponseCache:
    """Replies of models kept by what their requests send, so that nothing identical
    is paid twice: `raygent.agent(..., cache=cache)`, a call's `cache=`, or
    `raygent.batch(..., cache=cache)`.

    `store`: any raygent store (`SQLiteStore`, `RedisStore`, `PostgresStore`,
    `InMemoryStore`); None keeps the replies in this process's memory (on Ray each
    runner process has its own, for as long as it holds the cache: give a store to share
    replies between processes and between batches). `ttl`: seconds a reply is kept
    (None: until removed). `namespace`: entries of one namespace are never seen by
    another (tenants, experiments).

    A request is keyed on the provider, the endpoint, the model and the exact body it
    sends, less the stream fields (see `_key.request_key`); models that cannot say what
    they send (test doubles) are not cached. A fallback's models are cached each under
    its own key: a reply is found whichever of them gave it. A hit sends nothing: its trip's
    report says `cache="hit"`, its usage counts the reply's tokens with no request and no
    cost, and `saved` what it cost when it was paid. Concurrent identical requests in one
    process are sent once. Errors, refusals and incomplete replies are never stored, and
    a cache that fails (its store unreachable) never fails a run: the request is sent.

    Picklable: a copy in a Ray worker reconnects to the store there.
    """

    def __init__(
        self,
        store: CacheStore | None = None,
        ttl: float | None = None,
        namespace: str = "default",
    ) -> None:
        if store is not None and not isinstance(store, CacheStore):
            raise TypeError(f"store= takes a raygent store, not {type(store).__name__}")
        if ttl is not None and (isinstance(ttl, bool) or not ttl > 0):
            raise ValueError(f"ttl must be positive seconds or None, not {ttl!r}")
        if not isinstance(namespace, str) or not namespace:
            raise ValueError("namespace must be a non-empty string")
        self.store = store
        self.ttl = ttl
        self.namespace = namespace
        self._token = uuid.uuid4().hex
        self._setup()

    def _setup(self) -> None:
        self._store: CacheStore = self.store if self.store is not None else _memory(self._token)
        self._flights: dict[str, asyncio.Future[Entry | None]] = {}
        self._logged = False  # a failing store, told once

    def __getstate__(self) -> dict[str, Any]:
        return {k: self.__dict__[k] for k in ("store", "ttl", "namespace", "_token")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup()

    def __repr__(self) -> str:
        where = "memory" if self.store is None else type(self.store).__name__
        return f"ResponseCache({where}, ttl={self.ttl}, namespace={self.namespace!r})"

    @classmethod
    def at(
        cls, where: str, *, ttl: float | None = None, namespace: str = "default"
    ) -> ResponseCache:
        """A cache in the store `where` names, as the CLI's `--cache` takes it: "memory",
        a redis:// (rediss://) URL, a postgresql:// (postgres://) DSN, or a SQLite file."""
        _check_where(where)
        store: CacheStore | None
        if where == "memory":
            store = None
        elif where.startswith(("redis://", "rediss://", "unix://")):
            from ..stores import RedisStore

            store = RedisStore(where)
        elif where.startswith(("postgresql://", "postgres://")):
            from ..stores import PostgresStore

            store = PostgresStore(where)
        else:
            from ..stores import SQLiteStore

            store = SQLiteStore(where)
        return cls(store, ttl=ttl, namespace=namespace)

    def around(self, models: ModelAccess) -> CachedAccess:
        """`models`, consulting this cache first."""
        return CachedAccess(models, self)

    # -- the store: a failing cache is a missing one -----------------------------------

    async def _lookup(self, key: str) -> Entry | _Unavailable | None:
        try:
            data = await self._store.get_cached(self.namespace, key)
            return None if data is None else Entry.decode(data)
        except Exception as exc:
            self._failed("reading", exc)
            return UNAVAILABLE

    async def _keep(self, key: str, entry: Entry) -> bool:
        """Whether `entry` is in the store now."""
        try:
            await self._store.put_cached(self.namespace, key, entry.encode(), self.ttl)
        except Exception as exc:
            self._failed("storing", exc)
            return False
        return True

    def _failed(self, doing: str, exc: Exception) -> None:
        # Logged once per cache and process: a store that cannot be reached would
        # otherwise log a line per request (a job of 300 items, ~1,200 lines). The trips
        # it touched say `cache="unavailable"`, and a batch's report counts those.
        if not self._logged:
            self._logged = True
            log.warning(
                "response cache: %s the store failed, sending requests as if it missed "
                "(logged once; the batch summary counts the failures): %r",
                doing,
                exc,
            )

    # -- single flight: one request per key in flight in this process ---------------------

    def _flight(self, key: str) -> asyncio.Future[Entry | None] | None:
        """The flight to follow for `key`, if any: not another event loop's (it cannot be
        awaited here), nor one that landed with nothing to share (as if none flew)."""
        flight = self._flights.get(key)
        if flight is None or flight.get_loop() is not asyncio.get_running_loop():
            return None
        if flight.done() and flight.result() is None:
            return None
        return flight

    def _lead(self, key: str) -> asyncio.Future[Entry | None]:
        flight = self._flights[key] = asyncio.get_running_loop().create_future()
        return flight

    @staticmethod
    def _land(flight: asyncio.Future[Entry | None] | None, entry: Entry | None) -> None:
        """The followers go on with `entry` (None: each sends its own request)."""
        if flight is not None and not flight.done():
            flight.set_result(entry)

    def _drop(self, key: str, flight: asyncio.Future[Entry | None] | None) -> None:
        """The flight is over, its reply in the store: a new caller reads it there. (Kept
        until then, landed, so that nobody arriving meanwhile misses and sends again.)"""
        self._land(flight, None)
        if flight is not None and self._flights.get(key) is flight:
            del self._flights[key]

    async def _entry_for(
        self, key: str, signal: AbortSignal | None, missed: bool = False
    ) -> tuple[Entry | _Unavailable | None, asyncio.Future[Entry | None] | None]:
        """The stored entry for `key`, or the one the request in flight for it brought;
        else None and the flight this caller now leads (it sends the request, `_land`s
        the reply, then `_drop`s the flight), or None and no flight when the request it
        followed brought nothing to share (an error, a refusal, a cut-off reply, it was
        stopped): then each follower sends its own, at once. `UNAVAILABLE`: the store
        failed (the caller sends the request, leading no flight). `missed`: the store
        was just read for `key` and had nothing (it is not read again)."""
        flight = self._flight(key)
        if flight is None:
            entry = None if missed else await self._lookup(key)
            if entry is UNAVAILABLE:
                return entry, None
            if entry is not None:
                return entry, None
            flight = self._flight(key)  # someone may have taken off meanwhile
            if flight is None:
                return None, self._lead(key)
        return await abortable(asyncio.shield(flight), signal), None


_SCHEMES = ("redis", "rediss", "unix", "postgresql", "postgres")
# Something that looks like a URL: a scheme then a colon or a slash (`redis//host`,
# `redis:/host`, `reddis://host`), but not a Windows drive (`C:\\cache.db`).
_URLISH = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]+)(?P<sep>:/*|//)")


def _check_where(where: str) -> None:
    """Refuse a `--cache` value that looks like a URL but is no URL raygent reads: a
    typo must not become a SQLite file named after the scheme."""
    if not isinstance(where, str) or not where:
        raise InvalidOptionsError(f"a cache store must be named by a string, not {where!r}")
    match = _URLISH.match(where)
    if match is None:
        return
    scheme, sep = match.group("scheme"), match.group("sep")
    if scheme in _SCHEMES and sep == "://":
        return
    known = ", ".join(f"{name}://" for name in _SCHEMES)
    raise InvalidOptionsError(
        f"cache store {where!r} looks like a URL but is none raygent reads "
        f'(known: {known}; "memory"; or a SQLite file path)',
        option="cache",
    )


class CachedAccess(Link):
    """The cache link of a run's request path (`raygent.seams.request_path`): answers
    from a `ResponseCache` when it can, else sends through the access it wraps and keeps
    what came back. A fallback's models are cached each under its own key, and looked
    up all at once before any of them is sent: a reply kept for any of them answers,
    and nothing goes to a model before it (one that is down costs nothing on a warm
    cache); on a miss the fallback goes on as usual, each model's attempt through this
    link (its key not read twice)."""

    __slots__ = ("cache", "known")

    def __init__(
        self, inner: ModelAccess, cache: ResponseCache, known: _Looked | None = None
    ) -> None:
        super().__init__(inner)
        self.cache = cache
        self.known = known

    def complete(self, request: ModelRequest) -> Coroutine[Any, Any, ModelResponse]:
        composite = as_composite(request.model)
        if composite is None:
            return super().complete(request)
        return self._complete_fallback(composite, request)

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        composite = as_composite(request.model)
        if composite is None:
            return super().stream(request)
        return self._stream_fallback(composite, request)

    async def _complete_fallback(
        self, composite: CompositeModel, request: ModelRequest
    ) -> ModelResponse:
        looked = await self._look_up(composite.parts(), request.messages, request.options)
        if isinstance(looked, Entry):
            return looked.hit()
        return await split(composite, request, CachedAccess(self.inner, self.cache, looked))

    async def _stream_fallback(
        self, composite: CompositeModel, request: ModelRequest
    ) -> AsyncIterator[StreamChunk]:
        looked = await self._look_up(composite.parts(), request.messages, request.options)
        if isinstance(looked, Entry):
            for chunk in looked.replay():
                yield chunk
            return
        knowing = CachedAccess(self.inner, self.cache, looked)
        chunks = split_stream(composite, request, knowing)
        async with closing_stream(chunks):
            async for chunk in chunks:
                yield chunk

    async def _look_up(
        self, models: Sequence[Model], messages: Sequence[Message], options: ModelOptions
    ) -> Entry | _Looked:
        """A fallback's models' entries, read at once: the first model's (in order) that
        has one, else what was learnt (each model's key; the keys the store lacks)."""
        keys = {id(m): request_key(m, messages, options) for m in models}
        asked = [key for key in dict.fromkeys(keys.values()) if key is not None]
        found = await asyncio.gather(*(self.cache._lookup(key) for key in asked))
        by_key = dict(zip(asked, found, strict=True))
        for each in models:
            entry = by_key.get(keys[id(each)] or "")
            if isinstance(entry, Entry):
                return entry
        missed = frozenset(key for key, entry in by_key.items() if entry is None)
        return _Looked(keys, missed)

    def _key(self, request: ModelRequest) -> str | None:
        known = self.known
        if known is not None and id(request.model) in known.keys:
            return known.keys[id(request.model)]
        return request_key(request.model, request.messages, request.options)

    async def send(self, request: ModelRequest) -> ModelResponse:
        key = self._key(request)
        if key is None:
            return await self.inner.complete(request)
        cache = self.cache
        entry, flight = await cache._entry_for(key, request.signal, self._missed(key))
        if isinstance(entry, Entry):
            return entry.hit()
        kept: Entry | None = None  # (no flight: it followed one that brought nothing)
        reached = entry is not UNAVAILABLE
        try:
            try:
                response = await self.inner.complete(request)
                if storable(response):
                    kept = Entry.of(response)
            finally:
                cache._land(flight, kept)  # the followers go on at once
            if kept is not None and reached:
                reached = await cache._keep(key, kept)
        finally:
            cache._drop(key, flight)
        return with_fields(response, cache="miss" if reached else "unavailable")

    def _missed(self, key: str) -> bool:
        return self.known is not None and key in self.known.missed

    async def send_stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        key = self._key(request)
        if key is None:
            chunks = self.inner.stream(request)
            async with closing_stream(chunks):
                async for chunk in chunks:
                    yield chunk
            return
        cache = self.cache
        entry, flight = await cache._entry_for(key, request.signal, self._missed(key))
        if isinstance(entry, Entry):
            for chunk in entry.replay():
                yield chunk
            return
        kept: Entry | None = None
        reached = entry is not UNAVAILABLE
        recorded: list[StreamChunk] = []
        try:
            chunks = self.inner.stream(request)
            async with closing_stream(chunks):
                async for chunk in chunks:
                    if isinstance(chunk, Done):
                        response = chunk.response
                        if storable(response):
                            kept = Entry.of(response, recorded)
                        cache._land(flight, kept)
                        if kept is not None and reached:
                            reached = await cache._keep(key, kept)
                        chunk = Done(
                            with_fields(response, cache="miss" if reached else "unavailable")
                        )
                    else:
                        recorded.append(chunk)
                    yield chunk
        finally:
            cache._drop(key, flight)


@dataclass(frozen=True)
class _Looked:
    """What looking a fallback's models up learnt for its request: each model's key (by
    the model's identity: the same objects are routed next) and the keys the store
    lacked (their attempts do not read it again)."""

    keys: dict[int, str | None]
    missed: frozenset[str]

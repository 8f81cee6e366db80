"""The cached-values half every store shares: `BaseCacheStore`, the CacheStore methods.

A cached value is opaque bytes under (namespace, key), with an optional time to live; the
response cache (`raygent.ResponseCache`) keeps model replies there. `BaseCacheStore`
checks the arguments and hands the backend's primitives (`_get_cached`, `_put_cached`)
the time the value expires (None: never), computed from the store's clock. Redis
expires keys on its own clock (PX), the others compare with `clock()` when reading.
"""

from __future__ import annotations

from ._base import BaseStore

__all__ = ["MAX_MEMORY_CACHED", "BaseCacheStore"]

MAX_MEMORY_CACHED = 100_000  # values an InMemoryStore keeps (the oldest written go first)
_MAX_NAME = 200  # characters of a namespace or a key


def _check_name(what: str, value: str) -> None:
    if not isinstance(value, str) or not value or len(value) > _MAX_NAME:
        raise ValueError(f"a cache {what} is a non-empty string of at most {_MAX_NAME} chars")


class BaseCacheStore(BaseStore):
    """The CacheStore methods of every store, over the primitives its backend supplies."""

    async def get_cached(self, namespace: str, key: str) -> bytes | None:
        _check_name("namespace", namespace)
        _check_name("key", key)
        return await self._get_cached(namespace, key, self.clock())

    async def put_cached(
        self, namespace: str, key: str, value: bytes, ttl: float | None = None
    ) -> None:
        _check_name("namespace", namespace)
        _check_name("key", key)
        if not isinstance(value, bytes):
            raise TypeError(f"a cached value is bytes, not {type(value).__name__}")
        if ttl is not None and (isinstance(ttl, bool) or not ttl > 0):
            raise ValueError(f"ttl must be positive seconds or None, not {ttl!r}")
        now = self.clock()
        await self._put_cached(namespace, key, value, ttl, None if ttl is None else now + ttl)

    # -- the backend's primitives ----------------------------------------------------

    async def _get_cached(self, namespace: str, key: str, now: float) -> bytes | None:
        """The value if stored and not expired at `now` (expires_at > now), else None."""
        raise NotImplementedError

    async def _put_cached(
        self, namespace: str, key: str, value: bytes, ttl: float | None, expires_at: float | None
    ) -> None:
        """Store or replace the value; it expires at `expires_at` (None: never)."""
        raise NotImplementedError

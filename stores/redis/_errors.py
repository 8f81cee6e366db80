"""redis-py errors as store errors, for RedisStore and its durable runs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..protocol import StoreDataError, StoreUnavailableError

__all__ = ["translated"]

# Replies that say the server cannot serve now (not that the data is wrong).
_TRANSIENT = ("OOM", "READONLY", "LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN")


@contextmanager
def translated(ref: str | None) -> Iterator[None]:
    """redis-py errors as store errors (the URL, which may hold a password, is not named)."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError) as exc:
        raise StoreUnavailableError(f"Redis is unreachable: {exc}", ref=ref) from exc
    except ResponseError as exc:
        if str(exc).startswith(_TRANSIENT):
            raise StoreUnavailableError(f"Redis cannot write now: {exc}", ref=ref) from exc
        # WRONGTYPE, or a script's own check failed: the data under the key is not ours.
        raise StoreDataError(
            f"Redis refused an operation on {ref!r}: {exc}", ref=ref, position=None, reason=str(exc)
        ) from exc
    except RedisError as exc:
        raise StoreUnavailableError(f"Redis failed: {exc}", ref=ref) from exc

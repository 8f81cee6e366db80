"""Memory stores: where conversations live between runs.

`Store` is the protocol; `InMemoryStore` (tests, one process), `SQLiteStore` (the
embedded durable default), `RedisStore` and `PostgresStore` (shared by a cluster)
implement it, and `CompactingStore` (snapshot / replace_prefix) as well.
"""

from typing import TYPE_CHECKING, Any

from .memory import InMemoryStore
from .protocol import (
    AppendResult,
    CompactingStore,
    ConversationInfo,
    ErrorRecord,
    PositionConflictError,
    RunConflictError,
    RunRecord,
    RunStore,
    Scope,
    Snapshot,
    Store,
    StoreDataError,
    StoredMessage,
    StoreError,
    StoreUnavailableError,
)
from .sqlite import SQLiteStore

if TYPE_CHECKING:
    from .postgres import PostgresStore
    from .redis import RedisStore


def __getattr__(name: str) -> Any:
    # Imported when first named: RedisStore's client (redis-py, ~0.1 s with what it
    # pulls in) is paid only by a process that uses it, not by every Ray worker that
    # imports raygent; PostgresStore needs the `postgres` extra (psycopg), so raygent
    # itself imports without it.
    if name == "RedisStore":
        from .redis import RedisStore

        return RedisStore
    if name == "PostgresStore":
        try:
            from .postgres import PostgresStore
        except ImportError as exc:
            raise ImportError(
                "PostgresStore needs the postgres extra: pip install 'raygent[postgres]'"
            ) from exc
        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AppendResult",
    "CompactingStore",
    "ConversationInfo",
    "ErrorRecord",
    "InMemoryStore",
    "PositionConflictError",
    "PostgresStore",
    "RedisStore",
    "RunConflictError",
    "RunRecord",
    "RunStore",
    "SQLiteStore",
    "Scope",
    "Snapshot",
    "Store",
    "StoreDataError",
    "StoreError",
    "StoreUnavailableError",
    "StoredMessage",
]

"""Memory stores: where conversations live between runs.

`Store` is the protocol; `InMemoryStore` (tests, one process), `SQLiteStore` (the
embedded durable default), `RedisStore` and `PostgresStore` (shared by a cluster)
implement it, and `CompactingStore` (snapshot / replace_prefix) as well.
"""

from .memory import InMemoryStore
from .postgres import PostgresStore
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
from .redis import RedisStore
from .sqlite import SQLiteStore

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

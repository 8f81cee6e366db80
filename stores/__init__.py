"""Memory stores: where conversations and durable runs live between runs.

What lives where:
- `protocol`: the contract: `Store`, `CompactingStore` (snapshot / replace_prefix),
  `RunStore`, `CacheStore` (cached values with a ttl, for the response cache),
  `TimingStore` (recent timings of the ways a model is reached, for routing by
  deadline), `Scope`, the result values and the store errors;
- `memory`: `InMemoryStore` (tests, one process);
- `sqlite/`: `SQLiteStore`, the embedded durable default;
- `redis/`: `RedisStore`, shared by a cluster (imported when first named);
- `postgres/`: `PostgresStore`, shared by a cluster (the `postgres` extra; imported
  when first named);
- what every store shares: `_base` (`BaseStore`: argument checks, keys, batch identity,
  time, expiry), `_cache` (`BaseCacheStore`: the CacheStore checks and expiry times
  over each backend's two primitives), `_timings` (`BaseTimingStore`: the
  TimingStore checks over each backend's two primitives), `_runs` (`BaseRunStore`:
  the RunStore methods over each backend's storage primitives, the fencing decisions
  and the run conflict),
  `_codec` (keys, payload encodings, error records) and `_closer` (what closes a loop's
  client when the loop shuts down, for Redis and PostgreSQL).

Each store implements all five protocols; a backend's subpackage holds its store
(`_store`), its run primitives (`_runs`) and its plumbing, and exports the store.

This package may import only the base of raygent's core (its flat top-level modules:
raygent.errors, raygent.messages, raygent.redaction, ...) and its own protocol; never
a subpackage of the core (raygent.memory, raygent.agents, ...), which import it.
"""

from typing import TYPE_CHECKING, Any

from .memory import InMemoryStore
from .protocol import (
    AppendResult,
    CacheStore,
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
    TimingSample,
    TimingStore,
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
    "CacheStore",
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
    "TimingSample",
    "TimingStore",
]

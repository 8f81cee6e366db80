"""RedisStore: conversations and durable runs in Redis, shared by a cluster.

What lives where: `_store` the store, its connections and its conversations; `_runs`
its durable runs (the primitives of raygent.stores' BaseRunStore); `_scripts` the Lua
scripts every write runs; `_errors` the translation of redis-py errors into store errors.

May import redis-py, the base of the core (raygent.errors, messages, redaction) and
raygent.stores' own protocol and shared modules, never another store.
"""

from ._store import RedisStore

__all__ = ["RedisStore"]

"""SQLiteStore: conversations and durable runs in one SQLite file, the embedded default.

What lives where: `_store` the store and its conversations; `_runs` its durable runs
(the primitives of raygent.stores' BaseRunStore) and the chunked prune both use; `_db`
the schema, the connection and the worker thread every call runs on.

May import sqlite3, the base of the core (raygent.errors, messages, redaction) and
raygent.stores' own protocol and shared modules, never another store.
"""

from ._store import SQLiteStore

__all__ = ["SQLiteStore"]

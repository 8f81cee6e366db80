"""PostgresStore: conversations and durable runs in PostgreSQL (the `postgres` extra).

What lives where: `_store` the store and its conversations; `_runs` its durable runs
(the primitives of raygent.stores' BaseRunStore); `_sql` every statement, the schema
and its server-side functions; `_pool` the psycopg pool per event loop and the
translation of driver errors into store errors.

May import psycopg, the base of the core (raygent.errors, messages, redaction) and
raygent.stores' own protocol and shared modules, never another store.
"""

from ._store import PostgresStore

__all__ = ["PostgresStore"]

"""Memory stores: the store protocol, in-memory, SQLite and Redis.

Filled in by the memory issue.
"""

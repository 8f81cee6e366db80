"""SQLite plumbing for SQLiteStore: schema, connection, transactions, error mapping."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from ..protocol import StoreDataError, StoreError, StoreUnavailableError

T = TypeVar("T")

SCHEMA_VERSION = 3
BUSY_TIMEOUT_MS = 30_000
_BUSY_CODES = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (primary codes)
# The inline connection does not checkpoint (a checkpoint fsyncs, never on the event
# loop): every this many inline commits, the worker runs a passive one instead.
_CHECKPOINT_EVERY = 200

# Tables are prefixed so that the file can be shared with an application's own tables.
SCHEMA = """
CREATE TABLE raygent_schema (version INTEGER NOT NULL);
CREATE TABLE raygent_conversations (
    ref TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    user_id TEXT,
    metadata TEXT NOT NULL,
    revision INTEGER NOT NULL,
    length INTEGER NOT NULL,
    updated_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX raygent_conversations_updated ON raygent_conversations (updated_at);
CREATE TABLE raygent_messages (
    ref TEXT NOT NULL,
    position INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    created_at REAL NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (ref, position)
) WITHOUT ROWID;
CREATE TABLE raygent_batches (
    ref TEXT NOT NULL,
    batch_id BLOB NOT NULL,
    first_position INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (ref, batch_id)
) WITHOUT ROWID;
CREATE TABLE raygent_errors (
    id INTEGER PRIMARY KEY,
    ref TEXT NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX raygent_errors_ref ON raygent_errors (ref, id);
"""

# Version 2 adds durable runs, apart from conversations (a run id may equal a session id).
# The header is entry -1 of the entries table. Version 3 stamps each entry row with its
# write time (`at`), so that an append inserts one row and touches nothing else: the run
# row (epoch, outcome, and `updated_at` of its start, claim and finish) is not rewritten,
# its entry count is that of its entries (`length` is no longer kept), and a run's age is
# that of its newest row.
RUN_SCHEMA = """
CREATE TABLE IF NOT EXISTS raygent_runs (
    ref TEXT PRIMARY KEY,
    epoch INTEGER NOT NULL,
    length INTEGER NOT NULL,
    outcome BLOB,
    updated_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS raygent_runs_updated ON raygent_runs (updated_at);
CREATE TABLE IF NOT EXISTS raygent_run_entries (
    ref TEXT NOT NULL,
    seq INTEGER NOT NULL,
    entry BLOB NOT NULL,
    at REAL,
    PRIMARY KEY (ref, seq)
);
"""

# Cached values (raygent.ResponseCache), apart from conversations and runs. Added to any
# file on connect (IF NOT EXISTS), so it needs no schema version of its own: an older
# raygent reading the file ignores the table.
CACHE_SCHEMA = """
CREATE TABLE IF NOT EXISTS raygent_cache (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    expires_at REAL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID
"""


# Timings (raygent.batch(..., deadline=) learns from them), created like the cache table.
TIMINGS_SCHEMA = """
CREATE TABLE IF NOT EXISTS raygent_timings (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL,
    way TEXT NOT NULL,
    seconds REAL NOT NULL,
    ok INTEGER NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS raygent_timings_key ON raygent_timings (key, id)
"""


def immediate(db: sqlite3.Connection) -> _Immediate:
    """A write transaction that takes the write lock up front: `with immediate(db):`.

    BEGIN IMMEDIATE makes the read-check-insert of an append one critical section
    across processes; a deferred BEGIN would let two writers read the same length.
    """
    return _Immediate(db)


class _Immediate:
    # A class, not @contextmanager: it runs on every write, and a generator costs more.
    __slots__ = ("db",)

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        db = self.db
        try:
            if kind is None:
                db.execute("COMMIT")
                return
        except BaseException:
            self._rollback()
            raise
        self._rollback()

    def _rollback(self) -> None:
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")


def connect(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)  # transactions are explicit
    try:
        # busy_timeout first: switching to WAL needs a lock another process may hold.
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if path != ":memory:":
            _enable_wal(db)
            # In WAL mode NORMAL survives a process crash and skips an fsync per commit;
            # a power cut may lose the last commits, never corrupt the file.
            db.execute("PRAGMA synchronous = NORMAL")
        ensure_schema(db, path)
    except BaseException:
        db.close()
        raise
    return db


def _enable_wal(db: sqlite3.Connection) -> None:
    """Switch to WAL, waiting out other processes opening the same new file.

    Changing the journal mode can answer "database is locked" at once, without the busy
    handler (seen with two processes opening one fresh file): retry it within the busy
    timeout.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.005
    while True:
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc).lower() or time.monotonic() > deadline:
                raise
        time.sleep(delay)  # on the store's worker thread, never the event loop
        delay = min(delay * 2, 0.1)


def _execute_script(db: sqlite3.Connection, script: str) -> None:
    # Statement by statement: executescript() would commit the transaction first.
    for statement in script.split(";"):
        if statement.strip():
            db.execute(statement)


def ensure_schema(db: sqlite3.Connection, path: str) -> None:
    """Create the schema in a new file, or check an existing one's version.

    A version 1 file (before durable runs) is migrated in place: its run tables are
    added; a version 2 file's entries gain their write-time column. A file written by
    any other version raises StoreDataError instead of being read or written wrongly.
    """
    with immediate(db):
        found = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'raygent_schema'"
        ).fetchone()
        if found is None:
            _execute_script(db, SCHEMA + RUN_SCHEMA + ";" + CACHE_SCHEMA + ";" + TIMINGS_SCHEMA)
            db.execute("INSERT INTO raygent_schema (version) VALUES (?)", (SCHEMA_VERSION,))
            return
        versions = [row[0] for row in db.execute("SELECT version FROM raygent_schema")]
        if versions in ([1], [2]):
            if versions == [2]:  # its entries have no write time: their run row's counts
                db.execute("ALTER TABLE raygent_run_entries ADD COLUMN at REAL")
            _execute_script(db, RUN_SCHEMA + ";" + CACHE_SCHEMA + ";" + TIMINGS_SCHEMA)
            db.execute("UPDATE raygent_schema SET version = ?", (SCHEMA_VERSION,))
            return
        if versions == [SCHEMA_VERSION]:
            db.execute(CACHE_SCHEMA)
            _execute_script(db, TIMINGS_SCHEMA)
            return
    if versions != [SCHEMA_VERSION]:
        raise StoreDataError(
            f"{path}: raygent schema version {versions}, this raygent reads"
            f" version {SCHEMA_VERSION} (no migration exists from it; use a new file)",
            ref=None,
            position=None,
            reason="schema_version",
            found=versions,
        )


def translate(exc: sqlite3.Error, path: str) -> StoreError:
    """sqlite3 errors as store errors: lock and I/O trouble retryable, a file that can
    never be opened or written (no such folder, a read-only file system) not, the rest
    data."""
    text = str(exc)
    lowered = text.lower()
    if isinstance(exc, sqlite3.OperationalError) and (
        "unable to open" in lowered or "readonly" in lowered
    ):
        why = never_writable(path)
        if why is not None:
            return StoreUnavailableError(f"{path}: {text} ({why})", retryable=False, path=path)
    transient = ("locked", "busy", "unable to open", "disk i/o")
    if isinstance(exc, sqlite3.OperationalError) and any(t in lowered for t in transient):
        return StoreUnavailableError(f"{path}: {text}", path=path)
    return StoreDataError(f"{path}: {text}", ref=None, position=None, reason=text, path=path)


def never_writable(path: str) -> str | None:
    """Why the database file at `path` can never be opened for writing, if it cannot: a
    retry would meet the same (a batch would try every item again for nothing)."""
    if path == ":memory:" or path.startswith("file:"):
        return None
    file = os.path.abspath(path)
    folder = os.path.dirname(file)
    if not os.path.isdir(folder):
        return f"the folder {folder} does not exist"
    target = file if os.path.exists(file) else folder
    if not os.access(target, os.W_OK):
        return f"{target} is not writable (a read-only file system, or permissions)"
    return None


def connect_inline(path: str) -> sqlite3.Connection | None:
    """The second connection, for writes on the caller's thread: it never waits for a
    lock (busy_timeout 0), never checkpoints, and is as durable as the worker's. None
    (every call on the worker) for `:memory:`, or when the file is not in WAL mode."""
    if path == ":memory:":
        return None
    try:
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except sqlite3.Error:
        return None
    try:
        db.execute("PRAGMA busy_timeout = 0")
        db.execute("PRAGMA synchronous = NORMAL")
        db.execute("PRAGMA wal_autocheckpoint = 0")
        (mode,) = db.execute("PRAGMA journal_mode").fetchone()
        if str(mode).lower() == "wal":  # with a rollback journal, readers would block it
            return db
    except sqlite3.Error:
        pass
    db.close()
    return None


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return (int(code) & 0xFF) in _BUSY_CODES
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class Busy(Exception):
    """An inline write could not run now: the caller sends it to the worker instead."""


class Worker:
    """One thread owning one connection: every SQLite read of a store runs here, and
    every write that cannot run inline.

    A single connection is what `:memory:` needs, and one thread serialises the store's
    own calls, so only other processes contend for the write lock.

    Small writes skip the thread hop (the hop and the cold caches after it cost more
    than the write): `inline` runs them on the thread that made this worker, on a second
    connection that never waits for a lock. It runs only when the worker has nothing
    queued or running, so the store's calls still take effect in the order they were
    made; if the lock is held (another process, a checkpoint) it raises Busy, the
    transaction rolled back, and the write goes to the worker and its busy timeout.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.pid = os.getpid()
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="raygent-sqlite")
        self.db: sqlite3.Connection | None = None
        self.fast: sqlite3.Connection | None = None  # opened by the worker, used inline
        self.owner = threading.get_ident()
        self.lock = threading.Lock()
        self.pending = 0  # calls submitted to the worker and not yet done there
        self.inline_commits = 0

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> Future[T]:
        with self.lock:
            self.pending += 1
        future = self.executor.submit(self.call, fn)
        # Done: it ran to the end there, or was cancelled before it started.
        future.add_done_callback(self._done)
        return future

    def _done(self, _: object) -> None:
        with self.lock:
            self.pending -= 1

    def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            if self.db is None:
                self.db = connect(self.path)
                self.fast = connect_inline(self.path)
            return fn(self.db)
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc

    def inline(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a write transaction `fn` here and now, or raise Busy."""
        db = self.fast
        if db is None or self.pending or threading.get_ident() != self.owner:
            raise Busy
        try:
            result = fn(db)
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                raise Busy from None
            raise translate(exc, self.path) from exc
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc
        self.inline_commits += 1
        if self.inline_commits % _CHECKPOINT_EVERY == 0:
            self.submit(_checkpoint)  # not awaited: its result does not matter
        return result

    def close(self) -> None:
        for db in (self.db, self.fast):
            if db is not None:
                db.close()
        self.db = self.fast = None


def _checkpoint(db: sqlite3.Connection) -> None:
    db.execute("PRAGMA wal_checkpoint(PASSIVE)")

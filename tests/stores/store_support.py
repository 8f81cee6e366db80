"""Helpers for the store conformance suite: message shapes, a fake clock, direct access
to each backend's raw storage (to corrupt it or count records), and a writer that runs
in a spawned process."""

from __future__ import annotations

import asyncio
import sqlite3
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import redis
from shared_support import MESSAGE_SHAPES

from raygent import (
    AssistantMessage,
    Message,
    ProviderBlock,
    TextPart,
    ToolCall,
    UserMessage,
)
from raygent.stores import (
    InMemoryStore,
    PositionConflictError,
    PostgresStore,
    RedisStore,
    Scope,
    SQLiteStore,
    Store,
    StoredMessage,
    StoreUnavailableError,
)

MakeStore = Callable[..., Any]  # the make_store fixture: builds a store of the test's kind

# Every message shape, plus values that trip up encoders.
SHAPES: dict[str, Message] = {
    **MESSAGE_SHAPES,
    "awkward-text": UserMessage(
        content='nul \x00, quote ", brace }{, emoji 🦀, big int 18446744073709551616 \u2028'
    ),
    # A server-side compaction's turn: the block must come back exactly as it went in.
    "server-compaction": AssistantMessage(
        content=[
            ProviderBlock(
                provider="anthropic",
                kind="compaction",
                data={
                    "type": "compaction",
                    "content": 'Summary: the user asked "why?" \u2014 twice.\n',
                    "encrypted_content": "sim-seal-0f1e2d3c4b5a69788796a5b4",
                    "signature": None,
                    "tool_changes": [],
                },
            ),
            TextPart(text="Going on from the summary."),
        ]
    ),
    # A Gemini 3 turn: its thought summary, a signed text and a signed call, each sent
    # back byte for byte (the signature is what Gemini checks).
    "gemini-signed-turn": AssistantMessage(
        content=[
            ProviderBlock(
                provider="gemini", kind="thought", data={"text": "Two cities.", "thought": True}
            ),
            TextPart(text="Checking both."),
            ProviderBlock(
                provider="gemini", kind="signature", data={"thoughtSignature": "q1Jx/8+w=="}
            ),
            ProviderBlock(
                provider="gemini",
                kind="function_call",
                data={
                    "call_id": "gemini_5f3a",
                    "part": {
                        "functionCall": {"name": "get_weather", "args": {"city": "Zürich"}},
                        "thoughtSignature": "IR7BxOqNJB8Rcrtdn5JV_AJO4D8jVsNX",
                    },
                },
            ),
        ],
        tool_calls=[ToolCall.parse("gemini_5f3a", "get_weather", '{"city": "Zürich"}')],
    ),
    "provider-numbers": AssistantMessage(
        content=[
            ProviderBlock(
                provider="x",
                kind="numbers",
                data={"big": 2**63 - 1, "neg": -(2**62), "f": 0.1, "e": 1e-300, "t": True},
            )
        ]
    ),
}


class FakeClock:
    """A clock the test moves by hand (picklable, so stores holding it pickle too)."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def batch_of(writer: int, index: int) -> list[Message]:
    """Batch `index` of `writer`: 1 to 3 messages whose text says whose and which."""
    return [UserMessage(content=f"w{writer}b{index}m{i}") for i in range(1 + index % 3)]


def assert_batches_intact(
    stored: Sequence[StoredMessage], expected: dict[tuple[str, int], list[Message]]
) -> None:
    """Positions are exactly 0..n-1 and every batch is present once, whole and contiguous."""
    assert [s.position for s in stored] == list(range(len(stored)))
    groups: dict[tuple[str, int], list[StoredMessage]] = defaultdict(list)
    for item in stored:
        groups[(item.run_id, item.turn)].append(item)
    assert set(groups) == set(expected)
    for key, items in groups.items():
        positions = [i.position for i in items]
        assert positions == list(range(positions[0], positions[0] + len(items))), key
        assert [i.message for i in items] == expected[key], key


# -- raw storage access -----------------------------------------------------------


def _redis(store: RedisStore) -> redis.Redis:
    return redis.Redis.from_url(store.url)


def corrupt_message(store: Store, scope: Scope, position: int, garbage: bytes) -> None:
    """Overwrite the stored payload at `position` with `garbage`, behind the store's back."""
    ref = store.ref(scope)
    if isinstance(store, InMemoryStore):
        rows = store._conversations[ref].rows
        rows[position] = rows[position]._replace(payload=garbage)
    elif isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as db:
            db.execute(
                "UPDATE raygent_messages SET payload = ? WHERE ref = ? AND position = ?",
                (garbage, ref, position),
            )
    elif isinstance(store, PostgresStore):
        _pg(
            store,
            "UPDATE {s}.messages SET payload = %s WHERE ref = %s AND position = %s",
            (garbage, ref, position),
        )
    else:
        assert isinstance(store, RedisStore)
        with _redis(store) as client:
            client.lset(store.keys(ref)[0], position, garbage)


def corrupt_error(store: Store, scope: Scope, garbage: bytes) -> None:
    ref = store.ref(scope)
    if isinstance(store, InMemoryStore):
        store._conversations[ref].errors[0] = garbage
    elif isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as db:
            db.execute("UPDATE raygent_errors SET record = ? WHERE ref = ?", (garbage, ref))
    elif isinstance(store, PostgresStore):
        _pg(store, "UPDATE {s}.errors SET record = %s WHERE ref = %s", (garbage, ref))
    else:
        assert isinstance(store, RedisStore)
        with _redis(store) as client:
            client.lset(store.keys(ref)[3], 0, garbage)


def batch_records(store: Store, scope: Scope) -> int:
    """How many idempotency records the store keeps for `scope`."""
    ref = store.ref(scope)
    if isinstance(store, InMemoryStore):
        conversation = store._conversations.get(ref)
        return len(conversation.batches) if conversation else 0
    if isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as db:
            query = "SELECT COUNT(*) FROM raygent_batches WHERE ref = ?"
            return int(db.execute(query, (ref,)).fetchone()[0])
    if isinstance(store, PostgresStore):
        return int(_pg(store, "SELECT COUNT(*) FROM {s}.batches WHERE ref = %s", (ref,))[0][0])
    assert isinstance(store, RedisStore)
    with _redis(store) as client:
        return int(client.zcard(store.keys(ref)[1]))


def _pg(store: PostgresStore, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on the store's schema behind its back (its own connection)."""
    with psycopg.connect(store.dsn, autocommit=True) as db:
        cursor = db.execute(query.replace("{s}", f'"{store.schema}"'), params)  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []


def postgres_answers(dsn: str) -> str | None:
    """None if PostgreSQL takes a connection at `dsn`, else why not."""
    try:
        with psycopg.connect(dsn, connect_timeout=3) as db:
            db.execute("SELECT 1")
    except psycopg.Error as exc:
        return type(exc).__name__
    return None


def drop_schema(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')  # type: ignore[arg-type]


def delete_prefix(url: str, prefix: str) -> None:
    with redis.Redis.from_url(url) as client:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)


# -- a writer in another process ----------------------------------------------------


def process_writer(store: Store, scope: Scope, writer: int, batches: int, barrier: Any) -> None:
    """Append `batches` batches with expected_position, retrying on conflict (spawned)."""
    barrier.wait(timeout=60)  # both processes start writing together

    async def run() -> None:
        try:
            await write_batches(store, scope, writer, batches)
        finally:
            await store.aclose()

    asyncio.run(run())


async def write_batches(store: Store, scope: Scope, writer: int, batches: int) -> int:
    """Returns how many conflicts the writer met."""
    position, conflicts, unavailable = 0, 0, 0
    for index in range(batches):
        messages = batch_of(writer, index)
        while True:
            try:
                result = await store.append(
                    scope, f"w{writer}", index, messages, expected_position=position
                )
            except PositionConflictError as exc:
                position, conflicts = exc.actual, conflicts + 1
                continue
            except StoreUnavailableError:
                # Retryable by contract (e.g. SQLite's lock wait ran out on a loaded
                # machine); the idempotent append makes the retry safe.
                unavailable += 1
                if unavailable > 5:
                    raise
                continue
            position = result.first_position + result.count
            break
    return conflicts

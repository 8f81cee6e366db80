"""Appends per second and p50/p99 latency of each store, against raw driver baselines.

A typical save is a batch of 1-3 messages of ~1 KB each. Each store appends such
batches one after another to one session (`sequential`), then from 16 tasks to 16
sessions at once (`16 sessions`). The Redis baseline is redis-py doing the same writes
with no checks: RPUSH of the same msgpack envelopes (encoded beforehand) plus the same
bookkeeping keys (batch id, revision, index) in a MULTI pipeline; the figure that
matters is RedisStore's rate as a ratio of it, measured in the same run. Each round
runs every case in one mode, then in the other, the order turned round every round,
so a store and its baseline run back to back and noise hits both alike; the median
round's rate is reported (latencies over all rounds), and each ratio twice: of the
median rates, and each round's own ratio (median and range). The load is printed too.

The PostgreSQL baseline is psycopg (the driver PostgresStore uses) doing one plain
INSERT of the batch's rows (the same JSON payloads, sent as binary parameters as the
store sends them) per append, autocommit, at the server's own durability
(synchronous_commit untouched, as for the store), from a pool of the same size, no
checks; PostgresStore's rate is reported as a ratio of it. A second row sends the
payloads as text parameters (psycopg's default, hex-escaped: the baseline before the
store sent binary ones), for comparison with earlier figures.

A second table splits each case's cost: the CPU this process spent per append, and the
CPU the server's processes spent (PostgreSQL's or Redis's, read from /proc: a server on
this machine, with nothing else using it, for the figure to mean anything).

    python benchmarks/bench_stores.py
    python benchmarks/bench_stores.py --only postgres  # PostgresStore and its baseline
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import redis.asyncio as aioredis
from psycopg_pool import AsyncConnectionPool

from raygent import AssistantMessage, Message, ToolCall, ToolMessage, UserMessage
from raygent.stores import InMemoryStore, PostgresStore, RedisStore, Scope, SQLiteStore
from raygent.stores._codec import batch_id, encode_json, encode_msgpack, envelope_header

TEXT = ("The quick brown fox jumps over the lazy dog; " * 24)[:1000]
Append = Callable[[str, int], Awaitable[object]]  # (session, turn) -> one batch written
TEXT_BASELINE = "raw psycopg INSERT, text parameters"
RAW_INSERT = "raw psycopg INSERT (baseline)"
RAW_PIPELINE = "raw redis-py MULTI pipeline (baseline)"
MODES = {"sequential": 1, "16 sessions": 16}
Results = dict[tuple[str, str], list[tuple[float, list[float]]]]
Cpu = dict[tuple[str, str], list[tuple[float, float | None]]]
# The server processes whose CPU each case's appends cost, read from /proc (a server on
# this machine; on another, only this process's CPU is reported).
SERVERS = {"postgres": ("postgres",), "redis": ("redis-server",)}


BATCHES: list[list[Message]] = [  # a user turn; a tool round; a whole turn
    [UserMessage(content=TEXT)],
    [
        AssistantMessage(
            content=TEXT[:900], tool_calls=[ToolCall.parse("c1", "search", '{"q": "fox"}')]
        ),
        ToolMessage(call_id="c1", name="search", content=TEXT),
    ],
    [UserMessage(content=TEXT), AssistantMessage(content=TEXT), UserMessage(content=TEXT)],
]


def batch(turn: int) -> list[Message]:
    """1, 2 or 3 messages of ~1 KB (built once: the stores' own work is what is timed)."""
    return BATCHES[turn % 3]


def store_append(store: Any) -> Append:
    async def append(session: str, turn: int) -> object:
        return await store.append(Scope(session), "run", turn, batch(turn))

    return append


def scope_json(session: str) -> str:
    return json.dumps({"session_id": session, "user_id": None, "metadata": {}})


def raw_pipeline_append(client: aioredis.Redis, prefix: str) -> Append:
    """The same writes as RedisStore's append script, without its reads and checks."""
    encoded = {t: [encode_msgpack(m) for m in batch(t)] for t in range(3)}

    async def append(session: str, turn: int) -> object:
        payloads = encoded[turn % 3]
        header = envelope_header("run", turn, time.time())
        base = f"{prefix}:{{{session}:!}}"
        async with client.pipeline(transaction=True) as pipe:
            pipe.rpush(f"{base}:m", *(header + p for p in payloads))
            pipe.zadd(f"{base}:b", {batch_id("run", turn, payloads): turn})
            pipe.zremrangebyrank(f"{base}:b", 0, -257)
            pipe.hincrby(f"{base}:h", "rev", 1)
            pipe.hset(f"{base}:h", mapping={"at": time.time(), "scope": scope_json(session)})
            pipe.zadd(f"{prefix}:conversations", {session: time.time()})
            return await pipe.execute()

    return append


async def raw_insert_append(
    dsn: str, table: str, binary: bool = True
) -> tuple[Append, AsyncConnectionPool[Any]]:
    """One INSERT of the batch's rows per append: PostgresStore's writes minus its checks."""
    encoded = {t: [encode_json(m) for m in batch(t)] for t in range(3)}
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn,
        min_size=1,
        max_size=20,
        open=False,
        kwargs={"autocommit": True, "prepare_threshold": 0},
    )
    await pool.open(wait=True)
    async with pool.connection() as conn:
        await conn.execute(
            f"CREATE TABLE {table} (ref text, position bigint, run_id text, turn bigint,"
            " created_at float8, payload bytea, PRIMARY KEY (ref, position))"
        )
    positions: dict[str, int] = {}
    query = (
        f"INSERT INTO {table} SELECT %s, %s + t.o - 1, %s, %s, %s, t.p"
        " FROM unnest(%b::bytea[]) WITH ORDINALITY AS t(p, o)"
    )
    if not binary:
        query = query.replace("%b", "%s")

    async def append(session: str, turn: int) -> object:
        payloads = encoded[turn % 3]
        first = positions.get(session, 0)
        positions[session] = first + len(payloads)
        async with pool.connection() as conn:
            return await conn.execute(query, (session, first, "run", turn, time.time(), payloads))

    return append, pool


async def drive(append: Append, appends: int, sessions: int) -> tuple[float, list[float]]:
    """(appends/s, latencies in ms): `sessions` tasks, each on its own new session."""
    tag = uuid.uuid4().hex[:8]
    latencies: list[float] = []

    async def writer(index: int) -> None:
        session = f"bench-{tag}-{index}"
        for turn in range(appends // sessions):
            start = time.perf_counter()
            await append(session, turn)
            latencies.append((time.perf_counter() - start) * 1000)

    wall = time.perf_counter()
    await asyncio.gather(*(writer(i) for i in range(sessions)))
    return len(latencies) / (time.perf_counter() - wall), latencies


async def sqlite_full(path: Path) -> SQLiteStore:
    store = SQLiteStore(path)
    await store._run(lambda db: db.execute("PRAGMA synchronous = FULL"))
    inline = store._worker.fast if store._worker else None  # the loop-thread connection
    if inline is not None:
        inline.execute("PRAGMA synchronous = FULL")
    return store


async def run(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="raygent-bench-"))
    prefix = f"raygent-bench-{uuid.uuid4().hex[:8]}"
    client = aioredis.Redis.from_url(args.redis_url)
    stores: dict[str, Any] = {}
    if args.only != "postgres":
        stores["InMemoryStore"] = InMemoryStore()
        stores["SQLiteStore (WAL, synchronous=NORMAL)"] = SQLiteStore(folder / "normal.db")
        stores["SQLiteStore (WAL, synchronous=FULL)"] = await sqlite_full(folder / "full.db")
        stores["RedisStore"] = RedisStore(args.redis_url, prefix=prefix)
    stores["PostgresStore"] = PostgresStore(args.postgres_dsn, schema=prefix.replace("-", "_"))
    cases: dict[str, Append] = {name: store_append(s) for name, s in stores.items()}
    if args.only != "postgres":
        cases[RAW_PIPELINE] = raw_pipeline_append(client, prefix + "-raw")
    raw_tables = [prefix.replace("-", "_") + "_raw", prefix.replace("-", "_") + "_raw_text"]
    cases[RAW_INSERT], raw_pool = await raw_insert_append(args.postgres_dsn, raw_tables[0])
    cases[TEXT_BASELINE], text_pool = await raw_insert_append(
        args.postgres_dsn, raw_tables[1], binary=False
    )
    results: Results = {(case, mode): [] for case in cases for mode in MODES}
    cpu: Cpu = {(case, mode): [] for case in cases for mode in MODES}
    loads = [os.getloadavg()[0]]
    try:
        for append in cases.values():  # warm up connections, scripts and caches
            await drive(append, 48, 16)
        for index in range(args.rounds):
            for mode, sessions in MODES.items():
                # Each store beside its baseline, one mode at a time, the order turned
                # round every round: noise lands on both sides of every ratio alike.
                order = list(cases) if index % 2 == 0 else list(reversed(cases))
                for case in order:
                    server = server_of(case)
                    spent, served = time.process_time(), server_cpu(server)
                    results[case, mode].append(await drive(cases[case], args.appends, sessions))
                    spent, served = time.process_time() - spent, server_cpu(server) - served
                    cpu[case, mode].append(
                        (
                            spent * 1e6 / args.appends,
                            served * 1e6 / args.appends if server else None,
                        )
                    )
            loads.append(os.getloadavg()[0])
    finally:
        for store in stores.values():
            await store.aclose()
        async with await psycopg.AsyncConnection.connect(args.postgres_dsn, autocommit=True) as db:
            for table in raw_tables:
                await db.execute(f"DROP TABLE IF EXISTS {table}")
            await db.execute(f"DROP SCHEMA IF EXISTS {prefix.replace('-', '_')} CASCADE")
        await raw_pool.close()
        await text_pool.close()
        keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=1000)]
        if keys:
            await client.delete(*keys)
        await client.aclose()
    report(args, results, cpu, loads)


def server_of(case: str) -> tuple[str, ...]:
    """The server process names behind a case (none for the in-process stores)."""
    if "Postgres" in case or "psycopg" in case:
        return SERVERS["postgres"]
    if "Redis" in case or "redis" in case:
        return SERVERS["redis"]
    return ()


def server_cpu(names: tuple[str, ...]) -> float:
    """CPU seconds used so far by this machine's processes of those names (their
    user + system time; ended processes are not counted)."""
    if not names:
        return 0.0
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as file:
                stat = file.read()
        except OSError:
            continue  # ended meanwhile
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        if name.startswith(names):
            parts = fields.split()
            total += int(parts[11]) + int(parts[12])  # utime, stime
    return total / tick


def report(args: argparse.Namespace, results: Results, cpu: Cpu, loads: list[float]) -> None:
    print(
        f"\n{args.appends} appends a round (batches of 1-3 messages of ~1 KB),"
        f" median of {args.rounds} interleaved rounds; latency over all rounds"
    )
    print("load (1-minute average) at the start and after each round: " + fmt_loads(loads) + "\n")
    print(f"{'store':42} {'mode':12} {'appends/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
    for (case, mode), samples in results.items():
        rate = statistics.median(rate for rate, _ in samples)
        latencies = sorted(ms for _, lat in samples for ms in lat)
        p50 = latencies[len(latencies) // 2]
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        print(f"{case:42} {mode:12} {rate:10.0f} {p50:8.3f} {p99:8.3f}")
    print("\nCPU per append, median of the rounds: this process, and the store's server")
    print("(its processes on this machine, background ones included)\n")
    print(f"{'store':42} {'mode':12} {'client us':>10} {'server us':>10}")
    for (case, mode), samples in cpu.items():
        client = statistics.median(c for c, _ in samples)
        served = [s for _, s in samples if s is not None]
        server = f"{statistics.median(served):10.0f}" if served else f"{'-':>10}"
        print(f"{case:42} {mode:12} {client:10.0f} {server}")
    print()
    pairs = [
        ("RedisStore", RAW_PIPELINE, "raw pipeline"),
        ("PostgresStore", RAW_INSERT, "raw INSERT"),
        ("PostgresStore", TEXT_BASELINE, "raw INSERT with text parameters"),
    ]
    for store, baseline, name in pairs:
        for mode in MODES:
            if (store, mode) in results and (baseline, mode) in results:
                print(f"ratio {store} / {name}, {mode}: " + ratio(results, store, baseline, mode))
    print("\nreproduce: python benchmarks/bench_stores.py " + " ".join(sys.argv[1:]))


def ratio(results: Results, store: str, baseline: str, mode: str) -> str:
    """The ratio of the median rates, then each round's own ratio (store and baseline
    ran back to back): their median and range."""
    mine = [rate for rate, _ in results[store, mode]]
    theirs = [rate for rate, _ in results[baseline, mode]]
    rounds = sorted(a / b for a, b in zip(mine, theirs, strict=True))
    overall = statistics.median(mine) / statistics.median(theirs)
    return (
        f"{overall:.2f} (per round: median {statistics.median(rounds):.2f},"
        f" {rounds[0]:.2f}-{rounds[-1]:.2f})"
    )


def fmt_loads(loads: list[float]) -> str:
    return " ".join(f"{load:.1f}" for load in loads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=1600)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--only", choices=["postgres"], help="run PostgresStore and its raw baseline alone"
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    parser.add_argument(
        "--postgres-dsn",
        default="postgresql://raygent:raygent-test-secret@127.0.0.1:5432/raygent_test",
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()

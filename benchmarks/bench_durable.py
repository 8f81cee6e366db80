"""The cost of a durable run: CPU per trip against the same run without `durable=`, and
the size of what it writes.

1. CPU per trip. One agent run of `--trips` tool trips and a final answer, run plain and
   durable on SQLiteStore (a temp file), RedisStore (127.0.0.1:6379, a fresh prefix,
   removed afterwards) and InMemoryStore, with `delete_on_complete=True` (the default).
   A durable run writes a header, one entry per tool trip (a round quicker than 50 ms is
   written once, its reply and results together; a slower one writes its reply first)
   and an outcome. The simulator runs in its own process at
   zero latency, so the client process's CPU (`time.process_time`, every thread: the
   SQLite worker thread counts) is what raygent costs; Redis's own CPU is not counted.
   The cases alternate run by run over `--rounds`; the median round is reported, per trip and as
   a ratio to the plain run, and the median of each round's ratio to the plain run of
   the same round ("paired": what the summary lines quote; on a shared machine it moves
   less than the ratio of medians, since the load shifts between rounds). Then the same
   run on a session kept in SQLite (message policy), without and with `durable=` on the
   same file: what durability adds to a stored conversation's run. Target: <= 1.3x on
   SQLite.
2. Snapshot size. One run of `--long-trips` tool trips kept (`delete_on_complete=False`)
   and loaded back: header, entries and outcome bytes, and the bytes written per trip
   over the first and the last 10 trips. Flat means appends: each trip writes only what
   it added, never the conversation again.

    python benchmarks/bench_durable.py
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from _sim_process import sim_process

import raygent
from raygent import OpenAIModel
from raygent.stores import InMemoryStore, RedisStore, Scope, SQLiteStore

Case = Callable[[], Awaitable[object]]
ARGUMENTS = {"key": "the quarterly figures for the northern region", "limit": 20}
RESULT = "row: " + "revenue 1,234,567; costs 987,654; margin 20.0%; " * 8  # ~400 bytes


@raygent.tool
def lookup(key: str, limit: int) -> str:
    """Look a key up."""
    return RESULT


def script(trips: int, long_trips: int) -> dict[str, Any]:
    """One rule per run length: its replies (cycling, one per firing) are `n` tool calls
    and an answer, so sequential runs of that length each take exactly n + 1 of them."""

    def rule(n: int) -> dict[str, Any]:
        call = {"text": "Let me look.", "tool_calls": [{"name": "lookup", "arguments": ARGUMENTS}]}
        return {"match": {"last_user": f"^{n} trips"}, "reply": [call] * n + ["The figures: 42."]}

    return {"rules": [rule(trips), rule(long_trips)]}


async def cpu_per_run(case: Case, runs: int) -> float:
    start = time.process_time()
    for _ in range(runs):
        await case()
    return (time.process_time() - start) * 1e6 / runs


def checked(agent: raygent.Agent, prompt: str, trips: int, session: bool = False) -> Case:
    async def case() -> object:
        # A session run starts a new session each time: the same history length always.
        options = {"session_id": uuid.uuid4().hex} if session else {}
        result = await agent.execute(prompt, **options)
        assert result.ok and len(result.report.trips) == trips, result.error
        return result

    return case


async def cpu_ratios(args: argparse.Namespace, model: OpenAIModel, stores: dict[str, Any]) -> None:
    trips = args.trips + 1  # the tool trips and the answer
    prompt = f"{args.trips} trips please"
    cases: dict[str, Case] = {
        "plain run (baseline)": checked(
            raygent.agent(model=model, tools=[lookup], backend=raygent.seams.LOCAL), prompt, trips
        )
    }
    for name, store in stores.items():
        agent = raygent.agent(
            model=model,
            tools=[lookup],
            backend=raygent.seams.LOCAL,
            durable=raygent.Durable(store=store),
        )
        cases[f"durable, {name}"] = checked(agent, prompt, trips)
    # The same on a session kept in SQLite (message policy), with and without durable=:
    # what durability adds to a stored conversation's run.
    sessions = stores["SQLiteStore"]
    memory = raygent.Memory(store=sessions, save_policy="message")
    for name, durable in (
        ("session on SQLite (base 2)", None),
        ("durable session, SQLite", raygent.Durable(store=sessions)),
    ):
        agent = raygent.agent(
            model=model,
            tools=[lookup],
            backend=raygent.seams.LOCAL,
            memory=memory,
            durable=durable,
        )
        cases[name] = checked(agent, prompt, trips, session=True)
    for case in cases.values():
        await cpu_per_run(case, 10)  # warm up (and create the SQLite schema)
    rounds: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        # The cases alternate run by run: a change in the machine's speed (other work,
        # CPU steal) falls on every case of the round alike.
        spent = dict.fromkeys(cases, 0.0)
        for _ in range(args.runs):
            for name, case in cases.items():
                start = time.process_time()
                await case()
                spent[name] += time.process_time() - start
        for name in cases:
            rounds[name].append(spent[name] * 1e6 / args.runs)
    median = {name: statistics.median(values) / trips for name, values in rounds.items()}
    base = median["plain run (baseline)"]

    def paired(name: str, against: str = "plain run (baseline)") -> float:
        return statistics.median(a / b for a, b in zip(rounds[name], rounds[against], strict=True))

    print(
        f"\n1. CPU per trip, a run of {args.trips} tool trips + answer ({trips} trips), median of"
        f" {args.rounds} rounds of {args.runs} sequential runs\n"
    )
    header = f"{'case':28} {'CPU us/trip':>12} {'+us/trip':>9} {'x plain':>8} {'paired':>7}"
    print(header + "   rounds (x plain)")
    for name in cases:
        spread = " ".join(f"{v / trips / base:.2f}" for v in sorted(rounds[name]))
        extra, ratio = median[name] - base, median[name] / base
        figures = f"{median[name]:12.0f} {extra:9.0f} {ratio:8.2f} {paired(name):7.2f}"
        print(f"{name:28} {figures}   {spread}")
    writes = args.trips + 2
    print(f"(a durable run here writes {writes} times: header, 1 per tool trip, outcome)")
    ratio = paired("durable session, SQLite", "session on SQLite (base 2)")
    print(f"durable session / session on SQLite: {ratio:.2f}x paired")
    sqlite = paired("durable, SQLiteStore")
    print(f"durable SQLite / plain run:          {sqlite:.2f}x paired (target <= 1.3x)")


async def snapshot_size(args: argparse.Namespace, model: OpenAIModel, store: Any) -> None:
    n = args.long_trips
    agent = raygent.agent(
        model=model,
        tools=[lookup],
        backend=raygent.seams.LOCAL,
        max_trips=n + 1,
        durable=raygent.Durable(store=store, delete_on_complete=False),
    )
    run_id = uuid.uuid4().hex
    result = await agent.execute(f"{n} trips please", run_id=run_id)
    assert result.ok and len(result.report.trips) == n + 1, result.error
    record = await store.load_run(Scope(run_id))
    assert record is not None and record.outcome is not None
    entries = record.entries
    assert len(entries) == n, len(entries)  # one per (quick) tool trip
    # Every tool trip's entry carries only what it added: its reply, its tool result.
    decoded = [json.loads(e) for e in entries]
    assert [len(e["added"]) for e in decoded] == [2] * n
    per_trip = [len(entry) for entry in entries]
    # What rewriting the whole conversation at each of those steps would write instead.
    grown = list(itertools.accumulate(len(json.dumps(e["added"])) for e in decoded))
    conversation = len(json.dumps(json.loads(record.header)["messages"])) + grown[-1]
    first, last = statistics.mean(per_trip[:10]), statistics.mean(per_trip[-10:])
    total = len(record.header) + sum(map(len, entries))
    print(f"\n2. Snapshot of a {n}-trip tool run (+ answer) on SQLiteStore, entries kept\n")
    print(f"header                         {len(record.header):8,} bytes")
    print(f"entries                        {sum(map(len, entries)):8,} bytes in {len(entries)}")
    print(f"header + entries               {total:8,} bytes")
    print(f"largest entry                  {max(map(len, entries)):8,} bytes")
    print(f"outcome (written once, at end) {len(record.outcome):8,} bytes")
    print(f"the final conversation (JSON)  {conversation:8,} bytes")
    print(f"whole conversation every step  {sum(grown):8,} bytes (not what is written)")
    print(f"written per trip, trips 1-10   {first:8,.0f} bytes")
    print(f"written per trip, trips {n - 9}-{n}  {last:8,.0f} bytes ({last / first:.2f}x)")


async def run(args: argparse.Namespace, base: str) -> None:
    model = OpenAIModel("sim-gpt", base_url=base + "/v1", api_key="sk-bench")
    folder = Path(tempfile.mkdtemp(prefix="raygent-bench-"))
    prefix = f"raygent-bench-{uuid.uuid4().hex[:8]}"
    sqlite = SQLiteStore(folder / "runs.db")
    stores = {
        "SQLiteStore": sqlite,
        "RedisStore": RedisStore(args.redis_url, prefix=prefix),
        "InMemoryStore": InMemoryStore(),
    }
    try:
        await cpu_ratios(args, model, stores)
        await snapshot_size(args, model, sqlite)
    finally:
        for store in stores.values():
            await store.aclose()
        client = aioredis.Redis.from_url(args.redis_url)
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
        if keys:
            await client.delete(*keys)
        await client.aclose()
        shutil.rmtree(folder, ignore_errors=True)
    print("\nreproduce: python benchmarks/bench_durable.py " + " ".join(sys.argv[1:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trips", type=int, default=5, help="tool trips per run (part 1)")
    parser.add_argument("--long-trips", type=int, default=50, help="tool trips (part 2)")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    if args.long_trips < 20:
        parser.error("--long-trips must be at least 20 (its first and last 10 trips)")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as file:
        json.dump(script(args.trips, args.long_trips), file)  # JSON is YAML
    with sim_process("--script", file.name) as base:
        asyncio.run(run(args, base))
    Path(file.name).unlink()


if __name__ == "__main__":
    main()

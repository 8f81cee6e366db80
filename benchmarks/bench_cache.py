"""A response-cache hit's client CPU against a request's, per store.

The simulator runs in its own process (its CPU is not the client's). One request is a
trip's model access as the agent loop makes it: `LOCAL.models.complete(model, messages,
options)` over HTTP (the OpenAI adapter: the request body, the transport, the reply
parsed). A hit is the same call through `ResponseCache(store).around(LOCAL.models)` with
the reply already stored: the request key (the body built, hashed), the store's read,
the reply decoded. Call i sends conversation i (its own last question), so each hit
reads a key of its own, as a batch run again does. Both keep `--inflight` calls open
until `--calls` are done; the CPU this process spent is divided by the calls. Rounds
alternate request and hit so noise hits both alike; the median round's figures are
printed, and the ratio hit/request (goal: below 0.1 on SQLite and Redis). A miss (the
request plus the key and the store's write) is printed too, as its overhead over a
request.

    python benchmarks/bench_cache.py
    python benchmarks/bench_cache.py --stores sqlite,redis --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

# The script's own folder is on sys.path when run as `python benchmarks/...`.
from _sim_process import sim_process

from raygent import OpenAIModel, ResponseCache, SystemMessage, UserMessage
from raygent.models.contract import ModelOptions
from raygent.seams.local import LOCAL
from raygent.stores import InMemoryStore, PostgresStore, RedisStore, SQLiteStore

POSTGRES_DSN = "postgresql://raygent:raygent-test-secret@127.0.0.1:5432/raygent_test"
# A modest trip: a system prompt, a question and a few turns (~2 KB of request body).
MESSAGES = [
    SystemMessage(content="You are a careful assistant. " * 20),
    UserMessage(content="What is the capital of France? " * 5),
    UserMessage(content="And what is its population, roughly, in millions? " * 5),
]


def conversation(index: int) -> list[Any]:
    """Conversation `index`: MESSAGES and a last question of its own (its own key)."""
    return [*MESSAGES, UserMessage(content=f"Question number {index}?")]


OPTIONS = ModelOptions(temperature=0.0, max_tokens=200)
Call = Callable[[int], Awaitable[object]]


async def cpu_per_call(call: Call, total: int, inflight: int) -> float:
    """CPU ms this process spends per call, `inflight` calls open until `total` are done
    (call number i gets conversation i)."""
    remaining = total

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await call(remaining)

    started = time.process_time()
    await asyncio.gather(*(worker() for _ in range(inflight)))
    return (time.process_time() - started) * 1000 / total


def make_store(kind: str, folder: Path) -> Any:
    if kind == "memory":
        return InMemoryStore()
    if kind == "sqlite":
        return SQLiteStore(folder / "cache.db")
    if kind == "redis":
        return RedisStore("redis://127.0.0.1:6379/15", prefix=f"bench-cache-{uuid.uuid4().hex}")
    return PostgresStore(POSTGRES_DSN, schema=f"bench_cache_{uuid.uuid4().hex[:12]}")


async def run(args: argparse.Namespace, base_url: str) -> None:
    model = OpenAIModel("sim-gpt", base_url=base_url + "/v1", api_key="sk-bench-000000")
    kinds = args.stores.split(",")
    folder = Path(tempfile.mkdtemp(prefix="bench-cache-"))
    stores = {kind: make_store(kind, folder) for kind in kinds}
    caches = {kind: ResponseCache(store) for kind, store in stores.items()}

    conversations = [conversation(i) for i in range(args.calls)]

    async def request(i: int) -> object:
        return await LOCAL.models.complete(model, conversations[i], OPTIONS, None)

    def hit_of(cache: ResponseCache) -> Call:
        access = cache.around(LOCAL.models)

        async def hit(i: int) -> object:
            response = await access.complete(model, conversations[i], OPTIONS, None)
            assert response.cache == "hit"
            return response

        return hit

    def miss_of(cache: ResponseCache) -> Call:
        async def miss(i: int) -> object:
            # A fresh namespace each time: the key is new, the reply is stored.
            fresh = ResponseCache(cache.store, namespace=uuid.uuid4().hex)
            return await fresh.around(LOCAL.models).complete(model, conversations[i], OPTIONS, None)

        return miss

    # Every conversation's reply is stored in every cache (a hit reads a key of its own,
    # as a batch run again does), and the connections are open.
    for cache in caches.values():
        access = cache.around(LOCAL.models)

        async def store_reply(i: int, access: Any = access) -> object:
            return await access.complete(model, conversations[i], OPTIONS, None)

        await cpu_per_call(store_reply, args.calls, args.inflight)
    await cpu_per_call(request, 200, args.inflight)

    rows: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        base = await cpu_per_call(request, args.calls, args.inflight)
        rows.setdefault("request (baseline)", []).append(base)
        for kind, cache in caches.items():
            hit = await cpu_per_call(hit_of(cache), args.calls, args.inflight)
            miss = await cpu_per_call(miss_of(cache), args.calls // 4, args.inflight)
            rows.setdefault(f"hit, {kind}", []).append(hit)
            rows.setdefault(f"miss, {kind}", []).append(miss)
            ratios.setdefault(kind, []).append(hit / base)
    for store in stores.values():
        await store.aclose()

    print(
        f"client CPU per call, {args.calls} calls, {args.inflight} in flight, median of "
        f"{args.rounds} rounds"
    )
    print(f"{'case':<24} {'CPU ms/call':>12}")
    for name, values in rows.items():
        print(f"{name:<24} {statistics.median(values):>12.3f}")
    print()
    print(f"{'store':<10} {'hit/request CPU':>16} {'range over rounds':>20}  goal < 0.1")
    for kind, values in ratios.items():
        low, high = min(values), max(values)
        print(f"{kind:<10} {statistics.median(values):>16.3f} {f'{low:.3f}-{high:.3f}':>20}")
    print()
    print("reproduce: python benchmarks/bench_cache.py " + " ".join(sys.argv[1:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stores", default="memory,sqlite,redis,postgres")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--inflight", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with sim_process() as base_url:
        asyncio.run(run(args, base_url))


if __name__ == "__main__":
    main()

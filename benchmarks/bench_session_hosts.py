"""Session hosts: appends through a host to Redis beside direct `RedisStore.append` from
the driver, and the memory of many idle sessions hosted across the pool.

1. Appends. `--sessions` conversations are written at once, each by `--appends`
   appends of one ~1 KB message in sequence (what a run's saver does), fenced by
   `expected_position` as a lease is. `direct`: `RedisStore.append` from the driver.
   `hosts`: the path interactive sessions take on Ray: a lease per conversation from
   its host (one call: the turn and the history), the appends written to the same Redis
   by the run itself, fenced, and the lease handed back (one call, with what was
   appended). The same again as runs do it, `--run-appends` appends per lease. Rounds
   alternate so machine noise hits all alike; appends/s is the median round's over the
   whole time (opening and closing included), p50/p99 of the appends over all rounds;
   the ratios are hosts/direct.
2. Idle sessions. `--idle` sessions are each acquired, written once (a user message and
   an answer) and released through the hosts, `--concurrency` at once; the hosts' RSS
   before and after, and what they hold (cached conversations are LRU-bounded per host
   by `--max-cached`; gates and leases are dropped when idle).

Ray starts here (on its own ports: never Redis's 6379); Redis keys go under a fresh
prefix, deleted at the end.

    python benchmarks/bench_session_hosts.py
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable

import ray
import redis

from raygent import AssistantMessage, Memory, UserMessage
from raygent.actors import RayOptions
from raygent.actors.sessions.persistence import RaySessions
from raygent.stores import RedisStore, Scope

TEXT = ("The quick brown fox jumps over the lazy dog; " * 24)[:1000]
MESSAGE = [UserMessage(content=TEXT)]
Writer = Callable[[int], Awaitable[list[float]]]  # (round) -> latencies of its appends


def direct(store: RedisStore, sessions: int, appends: int) -> Writer:
    async def write(round_: int) -> list[float]:
        async def one(i: int) -> list[float]:
            scope, times = Scope(f"direct-{round_}-{i}"), []
            for turn in range(appends):
                started = time.perf_counter()
                await store.append(scope, "run", turn, MESSAGE, expected_position=turn)
                times.append(time.perf_counter() - started)
            return times

        return [t for ts in await asyncio.gather(*(one(i) for i in range(sessions))) for t in ts]

    return write


def through_hosts(
    hosts: RaySessions, store: RedisStore, sessions: int, appends: int, per_lease: int
) -> Writer:
    """`appends` appends per conversation, `per_lease` of them under each lease."""
    memory = Memory(store)

    async def write(round_: int) -> list[float]:
        async def one(i: int) -> list[float]:
            scope, times, turn = Scope(f"hosted-{per_lease}-{round_}-{i}"), [], 0
            while turn < appends:
                lease = await hosts.acquire(memory, scope, f"run-{turn}")
                for step in range(min(per_lease, appends - turn)):
                    started = time.perf_counter()
                    await lease.append(step, MESSAGE)
                    times.append(time.perf_counter() - started)
                turn += per_lease
                await lease.release()
            return times

        return [t for ts in await asyncio.gather(*(one(i) for i in range(sessions))) for t in ts]

    return write


async def appends_part(args: argparse.Namespace, hosts: RaySessions, store: RedisStore) -> None:
    hosted = f"hosts, {args.run_appends} appends a lease"
    writers = {
        "direct RedisStore.append": direct(store, args.sessions, args.appends),
        "through session hosts": through_hosts(
            hosts, store, args.sessions, args.appends, args.appends
        ),
        hosted: through_hosts(hosts, store, args.sessions, args.appends, args.run_appends),
    }
    await writers["through session hosts"](-1)  # warm: connections, store registration
    rates: dict[str, list[float]] = {name: [] for name in writers}
    latencies: dict[str, list[float]] = {name: [] for name in writers}
    for round_ in range(args.rounds):
        for name, write in writers.items():
            started = time.perf_counter()
            times = await write(round_)
            rates[name].append(len(times) / (time.perf_counter() - started))
            latencies[name].extend(times)
    print(
        f"\n{args.sessions} sessions at once x {args.appends} appends of one ~1 KB message, "
        f"{args.rounds} rounds, {args.hosts} hosts"
    )
    print(f"{'':28} {'appends/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'vs direct':>10}")
    direct_rate = statistics.median(rates["direct RedisStore.append"])
    for name in writers:
        lat = sorted(latencies[name])
        p50, p99 = lat[len(lat) // 2] * 1e3, lat[int(len(lat) * 0.99)] * 1e3
        rate = statistics.median(rates[name])
        print(f"{name:28} {rate:10.0f} {p50:8.2f} {p99:8.2f} {rate / direct_rate:10.2f}")
    ratio = statistics.median(rates["through session hosts"]) / direct_rate
    verdict = "ok" if ratio >= 0.8 else "BELOW TARGET"
    print(f"ratio hosts / direct: {ratio:.2f} (target >= 0.8: {verdict})")


async def idle_part(args: argparse.Namespace, hosts: RaySessions, store: RedisStore) -> None:
    memory, limit = Memory(store), asyncio.Semaphore(args.concurrency)
    before = await hosts.stats()
    answer = [AssistantMessage(content="hello")]

    async def one(i: int) -> None:
        async with limit:
            lease = await hosts.acquire(memory, Scope(f"idle-{i}"), f"run-{i}")
            await lease.append(0, [UserMessage(content=f"hi {i}"), *answer])
            await lease.release()

    started, done = time.perf_counter(), 0
    step = max(1, args.idle // 10)
    while done < args.idle:
        chunk = range(done, min(args.idle, done + step))
        await asyncio.gather(*(one(i) for i in chunk))
        done = chunk.stop
        print(f"  {done} sessions, {done / (time.perf_counter() - started):.0f}/s", flush=True)
    elapsed = time.perf_counter() - started
    after = await hosts.stats()
    mb = 1 / 2**20
    print(f"\n{args.idle} idle sessions through {args.hosts} hosts in {elapsed:.0f} s")
    print(f"{'host pid':>9} {'RSS before MB':>14} {'RSS after MB':>13} {'cached':>7} {'leases':>7}")
    for b, a in zip(before, after, strict=True):
        print(
            f"{a['pid']:>9} {b['rss_bytes'] * mb:14.0f} {a['rss_bytes'] * mb:13.0f} "
            f"{a['cached_sessions']:>7} {a['leases'] + a['gates']:>7}"
        )
    grown = sum(a["rss_bytes"] - b["rss_bytes"] for b, a in zip(before, after, strict=True))
    print(f"all hosts grew {grown * mb:.0f} MB: {grown / args.idle:.0f} bytes a session")


async def main(args: argparse.Namespace) -> None:
    namespace = f"raygent-bench-{uuid.uuid4().hex[:8]}"
    ray.init(
        num_cpus=2, include_dashboard=False, namespace=namespace, log_to_driver=False
    )  # a fresh local Ray: its GCS takes a free port, not 6379
    prefix = f"raygent-bench-{uuid.uuid4().hex[:8]}"
    store = RedisStore(args.redis, prefix=prefix)
    hosts = RaySessions(
        RayOptions(namespace=namespace), hosts=args.hosts, max_cached=args.max_cached
    )
    hosts.start()
    await hosts.stats()  # wait until they run
    try:
        await appends_part(args, hosts, store)
        if args.idle:
            await idle_part(args, hosts, store)
    finally:
        await store.aclose()
        _delete_prefix(args.redis, prefix)
        ray.shutdown()
    print("\nreproduce: python benchmarks/bench_session_hosts.py " + " ".join(sys.argv[1:]))


def _delete_prefix(url: str, prefix: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for i in range(0, len(keys), 1000):
            client.delete(*keys[i : i + 1000])
    finally:
        client.close()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=32, help="conversations at once")
    parser.add_argument("--appends", type=int, default=50, help="appends per conversation")
    parser.add_argument("--run-appends", type=int, default=3, help="appends per lease (a run)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle", type=int, default=100_000, help="idle sessions (0: skip)")
    parser.add_argument("--concurrency", type=int, default=128, help="idle sessions at once")
    parser.add_argument("--max-cached", type=int, default=10_000, help="per host")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))

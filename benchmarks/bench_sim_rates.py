"""The simulator's rate limits: what enforcing them costs the simulator, and that a
client ignoring them is held to the limit.

1. Cost: the same requests (a hand aiohttp loop, 64 in flight, zero latency) against a
   simulator with no limits and one with every limit set too high to bind (each in its
   own process), in alternating rounds, the plain one twice a round (A/A, the noise).
   Figures: the simulator's CPU per request and requests/s, limited / plain, beside
   A/A. Goal: within the noise. Also one admission and its headers alone (µs).
2. Holding: 64 in flight against `--rpm 1200` (20 a second), every 429 retried at once
   for `--seconds`: admitted per second past the first burst / the limit (goal ~1.0),
   the peak admitted in any one second (a bucket allows its burst, 20, plus a second's
   refill), the share of answers that were 429s.

    python benchmarks/bench_sim_rates.py [--requests 4000] [--rounds 3] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
from _procs import tree
from _sim_process import sim_stats

from raygent.sim import SimRateLimits
from raygent.sim._rates import Cost, RateLimiter

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}
NEVER_BINDS = ("--rpm", "1000000000", "--tpm", "1000000000", "--itpm", "1000000000")
NEVER_BINDS += ("--otpm", "1000000000")


@contextmanager
def sim(*args: str) -> Iterator[tuple[str, int]]:
    """A simulator process: its base URL and pid."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "raygent", "sim", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        yield line.split()[-1], proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def cpu_of(pid: int) -> float:
    return tree(pid, set())[pid].cpu


async def hammer(url: str, requests: int, inflight: int = 64) -> tuple[float, int]:
    """Send `requests` chat requests, `inflight` at a time, retrying 429s at once;
    return the seconds taken and the 429s seen."""
    left, refused = [requests], [0]
    connector = aiohttp.TCPConnector(limit=inflight)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def worker() -> None:
            while left[0] > 0:
                left[0] -= 1
                while True:
                    async with http.post(url + "/v1/chat/completions", json=BODY) as resp:
                        await resp.read()
                    if resp.status != 429:
                        break
                    refused[0] += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(inflight)))
        return time.perf_counter() - start, refused[0]


async def measure(url: str, pid: int, requests: int) -> tuple[float, float]:
    """CPU ms per request in the simulator, and requests/s."""
    before = cpu_of(pid)
    seconds, _ = await hammer(url, requests)
    return (cpu_of(pid) - before) * 1000 / requests, requests / seconds


async def cost(requests: int, rounds: int) -> None:
    with sim() as (plain, plain_pid), sim(*NEVER_BINDS) as (limited, limited_pid):
        await hammer(plain, 500)
        await hammer(limited, 500)  # warm both
        cpu_ratio, rate_ratio, aa_cpu, aa_rate = [], [], [], []
        for _ in range(rounds):
            a1 = await measure(plain, plain_pid, requests)
            b = await measure(limited, limited_pid, requests)
            a2 = await measure(plain, plain_pid, requests)
            mean_cpu, mean_rate = (a1[0] + a2[0]) / 2, (a1[1] + a2[1]) / 2
            cpu_ratio.append(b[0] / mean_cpu)
            rate_ratio.append(b[1] / mean_rate)
            aa_cpu.append(a2[0] / a1[0])
            aa_rate.append(a2[1] / a1[1])
            print(
                f"  round: plain {a1[0]:.3f}/{a2[0]:.3f} ms CPU, {a1[1]:.0f}/{a2[1]:.0f} req/s;"
                f" limited {b[0]:.3f} ms CPU, {b[1]:.0f} req/s"
            )
    print(
        f"1. limits that never bind / none: simulator CPU per request "
        f"{statistics.median(cpu_ratio):.2f} (A/A {statistics.median(aa_cpu):.2f}), "
        f"requests/s {statistics.median(rate_ratio):.2f} (A/A {statistics.median(aa_rate):.2f})"
    )
    limits = SimRateLimits(10**9, 10**9, 10**9, 10**9)
    rates, n = RateLimiter(limits), 100_000
    start = time.perf_counter()
    for i in range(n):
        now = float(i)
        rates.admit("k", "m", Cost(10, 20), now)
        rates.headers("openai", "k", "m", now)
    per = (time.perf_counter() - start) / n * 1e6
    print(f"   one admission and its headers alone, four limits: {per:.1f} µs")


async def holding(seconds: float) -> None:
    requests = int(20 * seconds)
    with sim("--rpm", "1200") as (url, _):
        elapsed, refused = await hammer(url, requests)
        async with aiohttp.ClientSession() as http:
            stats = await sim_stats(url, http=http)
    print(
        f"2. {requests} requests, 64 in flight, 429s retried at once, against 1,200/min "
        f"(20/s): admitted/s past the first burst / limit {(requests - 20) / elapsed / 20:.2f}, "
        f"peak in one second "
        f"{stats['peak_requests_per_second']} (bucket 20 + refill 20), "
        f"429s {refused / (requests + refused):.0%} of answers"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    asyncio.run(cost(args.requests, args.rounds))
    asyncio.run(holding(args.seconds))
    print(f"load average {os.getloadavg()[0]:.2f}")
    print("reproduce: python benchmarks/bench_sim_rates.py")


if __name__ == "__main__":
    main()

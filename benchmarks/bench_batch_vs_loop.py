"""`raygent.batch` of one-trip items against a hand-written asyncio + aiohttp loop, in
alternating rounds of one run: the ratio of each round, and CPU per item in every
process (the driver, Ray's runners and its own processes; the simulator left out).

The job of issue 38: `--items` one-trip items (an agent with no tools), `--bound` in
flight, against the simulator in its own process answering at `--latency-ms`. The hand
loop posts the same OpenAI body with `--bound` aiohttp workers. Rounds alternate hand
loop and batch, so load on the machine hits both alike; every round's ratio is printed
(the target: each >= 0.90 on Ray, >= 0.92 locally, on a quiet machine), with the load
average before and after, since these machines are shared.

    python benchmarks/bench_batch_vs_loop.py --backend ray
    python benchmarks/bench_batch_vs_loop.py --backend local

It runs unchanged on older commits (it was used to bisect the issue).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable

import aiohttp

# The script's own folder is on sys.path when run as `python benchmarks/...`.
from _procs import CpuMeter, pids_matching
from _sim_process import sim_process

import raygent
from raygent import OpenAIModel, UserMessage

PROMPT = "Say something short."
JSON = {"content-type": "application/json"}


async def hand_loop(call: Callable[[], Awaitable[object]], bound: int, items: int) -> float:
    """Items/s of `bound` workers calling `call` until `items` are done."""
    results: list[object] = [None] * items  # each reply kept, as a batch keeps results
    feed = iter(range(items))

    async def worker() -> None:
        for index in feed:
            results[index] = await call()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(bound)))
    return items / (time.perf_counter() - start)


async def batch_run(agent: object, bound: int, items: int) -> float:
    start = time.perf_counter()
    result = await raygent.batch(agent, [PROMPT] * items, concurrency=bound)
    elapsed = time.perf_counter() - start
    assert result.report.succeeded == items, result.report
    return items / elapsed


async def main_async(args: argparse.Namespace, base: str) -> list[dict[str, float]]:
    model = OpenAIModel(
        "sim-gpt", base_url=base + "/v1", api_key="sk-bench", max_concurrency=args.bound
    )
    agent = raygent.agent(model=model)
    body = json.dumps(model.request_body([UserMessage(content=PROMPT)], None, stream=False))
    url = base + "/v1/chat/completions"
    http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def one_request() -> object:
        async with http.post(url, data=body.encode(), headers=JSON) as response:
            response.raise_for_status()
            return json.loads(await response.read())

    meter = CpuMeter(os.getpid(), pids_matching(b"raygent\x00sim"))
    # Warm up: connections, the runner actors, the gateway's lease.
    await hand_loop(one_request, args.bound, args.bound * 2)
    await batch_run(agent, args.bound, args.bound * 2)
    rounds = []
    for _ in range(args.rounds):
        row: dict[str, float] = {"load": os.getloadavg()[0]}
        for name in ("hand", "batch"):
            meter.start()
            if name == "hand":
                rate = await hand_loop(one_request, args.bound, args.items)
            else:
                rate = await batch_run(agent, args.bound, args.items)
            cpu = meter.split()
            row[name] = rate
            row[name + "_cpu"] = sum(cpu.values()) * 1000 / args.items
            row[name + "_driver_cpu"] = cpu.get("driver", 0.0) * 1000 / args.items
        rounds.append(row)
    await http.close()
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["local", "ray"], default="ray")
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--bound", type=int, default=64)
    parser.add_argument("--latency-ms", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    raygent.init(args.backend)
    with sim_process("--latency-ms", str(args.latency_ms)) as base:
        rounds = asyncio.run(main_async(args, base))
    ideal = args.bound * 1000 / args.latency_ms
    print(
        f"\n{args.backend}: {args.items} one-trip items a round, bound {args.bound}, "
        f"{args.latency_ms} ms; ideal {ideal:.0f} items/s"
    )
    print(
        f"{'round':>5} {'load':>5} {'hand/s':>7} {'batch/s':>8} {'ratio':>6} "
        f"{'hand CPU ms/item':>17} {'batch CPU ms/item (driver)':>27}"
    )
    for n, row in enumerate(rounds, 1):
        print(
            f"{n:5} {row['load']:5.2f} {row['hand']:7.0f} {row['batch']:8.0f} "
            f"{row['batch'] / row['hand']:6.2f} {row['hand_cpu']:17.2f} "
            f"{row['batch_cpu']:19.2f} ({row['batch_driver_cpu']:.2f})"
        )
    ratios = [row["batch"] / row["hand"] for row in rounds]
    target = 0.90 if args.backend == "ray" else 0.92
    verdict = "ok" if min(ratios) >= target else "BELOW TARGET"
    print(f"\nratio batch / hand loop, min {min(ratios):.2f} (target >= {target}: {verdict})")
    print(f"load average now: {os.getloadavg()[0]:.2f}")
    print("reproduce: python benchmarks/bench_batch_vs_loop.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()

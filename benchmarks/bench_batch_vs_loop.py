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

`--ab` (Ray) adds, in every round, a batch under the policy before issue 38's fix: the
runners send results back 20 ms after the first one ended, and the driver tops a runner
up once a quarter of its slots are free; both policies then meet the same load.
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


def _before_fix(on: bool) -> None:
    """Issue 38's A/B: the runners' and the driver's policy before the fix (`on`), or now."""
    import ray

    from raygent.actors.batch import execution

    def flip(_: object) -> None:  # runs in each runner's process
        from raygent.actors.batch import runner

        now = runner.__dict__.setdefault("_gather_now", runner._gather)

        async def fixed_wait(state: object, enough: int) -> None:
            await asyncio.sleep(runner.FLUSH_INTERVAL)

        runner._gather = fixed_wait if on else now

    execution.REFILL_SHARE = 4 if on else 8
    handles = [h for pool in execution._fleet._runners.values() for h in pool]
    ray.get([h.__ray_call__.remote(flip) for h in handles])


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
        for name in ("hand", "batch", "before") if args.ab else ("hand", "batch"):
            meter.start()
            if name == "hand":
                rate = await hand_loop(one_request, args.bound, args.items)
            else:
                if args.ab:
                    _before_fix(name == "before")
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
    parser.add_argument("--ab", action="store_true", help="also the policy before the fix")
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
    if args.ab:
        print("\nthe policy before issue 38's fix, the same rounds:")
        for n, row in enumerate(rounds, 1):
            print(
                f"{n:5} before/hand {row['before'] / row['hand']:5.2f}   "
                f"now/before {row['batch'] / row['before']:5.2f}   "
                f"CPU ms/item {row['before_cpu']:5.2f}"
            )
    ratios = [row["batch"] / row["hand"] for row in rounds]
    target = 0.90 if args.backend == "ray" else 0.92
    verdict = "ok" if min(ratios) >= target else "BELOW TARGET"
    print(f"\nratio batch / hand loop, min {min(ratios):.2f} (target >= {target}: {verdict})")
    print(f"load average now: {os.getloadavg()[0]:.2f}")
    print("reproduce: python benchmarks/bench_batch_vs_loop.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()

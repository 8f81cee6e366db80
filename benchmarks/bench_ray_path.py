"""The Ray path against the in-process one, on raygent's main job (the demo's shape).

An agent with one tool and structured output answers questions in bulk with
`raygent.batch`, each traveller's questions in their own SQLite-stored conversation
under the `turn` save policy; the model (bound `--bound`) is the simulator in its own
process. The same batch runs on the local backend and on Ray (batch runners) in one run,
rounds interleaved, fresh conversations each round.

1. Throughput at `--latency-ms`: items/s, latency p50/p95, the Ray/local ratios, the
   simulator's peak in flight, and the `ray::` processes alive after each Ray batch.
   Targets: Ray >= 0.8 x local items/s, Ray p95 <= 2 x local, peak <= bound.
2. CPU per item at zero latency: the local run's (this process alone: nothing else
   works for it) against the Ray run's summed over every process of the tree (driver,
   runners, gateway, tool executors, raylet, GCS, Ray's agents), split per process kind.
   Target: Ray <= 2 x local.
3. Width: the Ray batch again at `--wide` in flight; the `ray::` processes must stay a
   fixed handful (<= 16 here), not grow with the runs in flight.
4. Per item on the Ray path (the units of the cost model in benchmarks/README.md):
   remote calls (runner chunks and result batches, gateway lease calls, session-host
   and tool-executor calls), bytes sent to the runners and back, the driver's CPU.

    python benchmarks/bench_ray_path.py
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import ray
from _procs import CpuMeter, pids_matching, ray_workers
from _sim_process import sim_process, sim_stats
from pydantic import BaseModel

import raygent
from raygent import Memory, OpenAIModel
from raygent.actors import RayOptions, ray_backend
from raygent.seams.contract import Backend
from raygent.seams.local import LOCAL
from raygent.stores import SQLiteStore

SCRIPT = str(Path(__file__).with_name("ray_path_script.yaml"))
TRAVELLERS = 100


class Forecast(BaseModel):
    city: str
    temp_c: float
    summary: str


@raygent.tool
def get_weather(city: str) -> dict[str, object]:
    """Current weather for a city.

    Args:
        city: the city's name.
    """
    return {"city": city, "temp_c": float(4 + sum(map(ord, city)) % 25), "sky": "clear"}


def forecaster(
    base: str, db: Path, bound: int, backend: Backend, rpm: float | None = None
) -> raygent.Agent:
    model = OpenAIModel(
        "sim-gpt",
        base_url=base + "/v1",
        api_key="sk-bench",
        max_concurrency=bound,
        rate_limit=raygent.RateLimit(requests_per_minute=rpm) if rpm else None,
    )
    return raygent.agent(
        "forecaster",
        model=model,
        system_prompt="You answer weather questions for travellers.",
        tools=[get_weather],
        output=Forecast,
        memory=Memory(SQLiteStore(db), save_policy="turn"),
        backend=backend,
    )


def rows(items: int, tag: str) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{tag}-{i}",
            "input": f"What's the weather in Paris? (question {i})",
            "session_id": f"{tag}-traveller-{i % TRAVELLERS}",
        }
        for i in range(items)
    ]


class Bench:
    def __init__(self, args: argparse.Namespace, folder: Path) -> None:
        self.args, self.folder = args, folder
        # --tools-on-executors: the runner's tools go to the node's tool executors (a Ray
        # call each) instead of running in the runner (RayOptions.tools_in_runners).
        options = RayOptions(tools_in_runners=not args.tools_on_executors)
        self.backends = {"local": LOCAL, "ray": ray_backend(options)}
        self.runs = 0

    async def batch(self, base: str, kind: str, items: int, concurrency: int) -> Any:
        self.runs += 1
        tag = f"{kind}{self.runs}"
        agent = forecaster(
            base, self.folder / f"{tag}.db", self.args.bound, self.backends[kind], self.args.rpm
        )
        result = await raygent.batch(
            agent, rows(items, tag), concurrency=concurrency, progress=False
        )
        assert result.report.succeeded == items, (result.report, result.items[:1])
        return result


async def throughput(bench: Bench, base: str) -> None:
    args, me, skip = bench.args, ray_ids()[0], ray_ids()[1]
    rates: dict[str, list[float]] = {"local": [], "ray": []}
    p50: dict[str, list[float]] = {"local": [], "ray": []}
    p95: dict[str, list[float]] = {"local": [], "ray": []}
    procs: list[int] = []
    peak = 0
    for kind in ("local", "ray"):  # warm up: runners, gateways, executors, pools
        await bench.batch(base, kind, args.concurrency * 2, args.concurrency)
    for _ in range(args.rounds):
        for kind in ("local", "ray"):
            await sim_stats(base, reset=True)
            result = await bench.batch(base, kind, args.items, args.concurrency)
            report = result.report
            rates[kind].append(report.throughput)
            p50[kind].append(report.latency_p50)
            p95[kind].append(report.latency_p95)
            peak = max(peak, (await sim_stats(base))["peak_in_flight"])
            if kind == "ray":
                procs.append(len(ray_workers(me, skip)))
    med = {
        k: (statistics.median(rates[k]), statistics.median(p50[k]), statistics.median(p95[k]))
        for k in rates
    }
    print(
        f"\n1. throughput: {args.items} items a round ({TRAVELLERS} sessions, turn policy, "
        f"SQLite), {args.concurrency} in flight, bound {args.bound}, {args.latency_ms} ms "
        f"latency; median of {args.rounds} interleaved rounds\n"
    )
    print(f"{'backend':8} {'items/s':>8} {'p50 s':>7} {'p95 s':>7}")
    for kind, (rate, q50, q95) in med.items():
        print(f"{kind:8} {rate:8.0f} {q50:7.3f} {q95:7.3f}")
    ratio = med["ray"][0] / med["local"][0]
    tail = med["ray"][2] / med["local"][2]
    print(
        f"\nRay / local items/s: {ratio:.2f} (target >= 0.8: {ok(ratio >= 0.8)}); "
        f"Ray p95 / local p95: {tail:.2f} (target <= 2: {ok(tail <= 2)})"
    )
    print(f"simulator peak in flight: {peak} (bound {args.bound}: {ok(peak <= args.bound)})")
    print(f"ray:: processes after each Ray batch: {procs}")


async def cpu(bench: Bench, base: str) -> None:
    args, (me, skip) = bench.args, ray_ids()
    meter = CpuMeter(me, skip)
    split: dict[str, dict[str, float]] = {}
    per_item: dict[str, float] = {}
    for kind in ("local", "ray"):
        await bench.batch(base, kind, args.concurrency, args.concurrency)  # warm
        meter.start()
        driver = time.process_time()
        await bench.batch(base, kind, args.zero_items, args.concurrency)
        driver_ms = (time.process_time() - driver) * 1000 / args.zero_items
        split[kind] = {k: v * 1000 / args.zero_items for k, v in meter.split().items()}
        per_item[kind] = driver_ms if kind == "local" else sum(split[kind].values())
    print(
        f"\n2. CPU per item at zero latency ({args.zero_items} items, {args.concurrency} in "
        f"flight): local {per_item['local']:.2f} ms (this process), Ray "
        f"{per_item['ray']:.2f} ms (every process)"
    )
    ratio = per_item["ray"] / per_item["local"]
    print(f"Ray / local CPU per item: {ratio:.2f} (target <= 2: {ok(ratio <= 2)})")
    print("the Ray run's CPU per item, by process (ms):")
    for name, ms in sorted(split["ray"].items(), key=lambda kv: -kv[1]):
        if ms >= 0.005:
            print(f"  {name:32} {ms:6.2f}")


async def width(bench: Bench, base: str) -> None:
    args, (me, skip) = bench.args, ray_ids()
    counts = {}
    for concurrency in (args.concurrency, args.wide):
        await bench.batch(base, "ray", max(args.items // 2, concurrency * 2), concurrency)
        counts[concurrency] = len(ray_workers(me, skip))
    print(f"\n3. ray:: processes after a Ray batch, by runs in flight: {counts}")
    most = max(counts.values())
    print(f"fixed handful (<= 16, not growing with the runs in flight): {ok(most <= 16)}")


async def units(bench: Bench, base: str) -> None:
    """Remote calls and bytes per item of one Ray batch, from the pool's own counters and
    the gateway's."""
    from raygent.actors import gateway_names
    from raygent.actors.batch import execution as batch_runners

    args, pools = bench.args, []
    run = batch_runners.RunnerPool.run

    async def kept(self: Any, feed: Any) -> None:
        pools.append(self)
        await run(self, feed)

    batch_runners.RunnerPool.run = kept  # type: ignore[method-assign]
    gateway = ray.get_actor(gateway_names(1)[0], namespace="raygent")
    syncs = (await gateway.stats.remote())["syncs"]
    cpu = time.process_time()
    try:
        result = await bench.batch(base, "ray", args.items, args.concurrency)
    finally:
        batch_runners.RunnerPool.run = run  # type: ignore[method-assign]
    driver_ms = (time.process_time() - cpu) * 1000 / args.items
    syncs = (await gateway.stats.remote())["syncs"] - syncs
    runners = [r for pool in pools for r in pool._runners]
    items = args.items
    sent = sum(len(ray.cloudpickle.dumps(job)) for job in _jobs(result)) / len(result.items)
    back = sum(r.received for r in runners) / items
    print(f"\n4. per item on the Ray path ({items} items, {len(runners)} runner(s)):")
    print(
        f"  runner calls: {sum(r.chunks for r in runners) / items:.3f} chunks sent, "
        f"{sum(r.answers for r in runners) / items:.3f} result batches received"
    )
    print(
        f"  gateway lease calls: {syncs / items:.4f}; session-host calls: 0; "
        f"tool-executor calls: {1.0 if args.tools_on_executors else 0.0:.0f} "
        f"({'on the executors' if args.tools_on_executors else 'tools run in the runner'})"
    )
    print(f"  bytes: ~{sent:.0f} to the runner (the job), {back:.0f} back (the result)")
    print(f"  driver CPU: {driver_ms:.2f} ms (reading, sending, unpickling, recording)")


def _jobs(result: Any) -> list[Any]:
    from raygent.seams.batch import Job

    return [Job(i.index, i.key, input=i.input, meta=i.meta) for i in result.items[:200]]


def ok(passed: bool) -> str:
    return "ok" if passed else "MISSED"


def ray_ids() -> tuple[int, set[int]]:
    import os

    return os.getpid(), pids_matching(b"raygent\x00sim")


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as folder:
        bench = Bench(args, Path(folder))
        latency = ["--latency-ms", str(args.latency_ms), "--jitter-ms", str(args.latency_ms / 5)]
        with sim_process("--script", SCRIPT, *latency) as base:
            await throughput(bench, base)
            await width(bench, base)
            await units(bench, base)
        with sim_process("--script", SCRIPT) as base:
            await cpu(bench, base)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1200)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--bound", type=int, default=32)
    # A rate limit on the model that never binds (its cost, against a run without one).
    parser.add_argument("--rpm", type=float, default=None)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--zero-items", type=int, default=1000)
    parser.add_argument("--wide", type=int, default=512)
    parser.add_argument("--tools-on-executors", action="store_true")
    args = parser.parse_args()
    # A local Ray of its own, on free ports (never Redis's 6379).
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        asyncio.run(main_async(args))
    finally:
        ray.shutdown()
    print("\nreproduce: python benchmarks/bench_ray_path.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()

"""What a budget costs per request: the same batch with and without a job budget, on the
local backend and on Ray (batch runners, the gateway keeping the budget).

An agent with declared pricing answers `--items` questions with `raygent.batch` at zero
latency (the simulator in its own process), with no budget and with a job budget too
large to bind (so both batches send the same requests); rounds interleaved.

1. CPU per item: locally this process's; on Ray every process of the tree (driver,
   runners, gateway, Ray's own). Goal: budget / none within the noise of the
   bench_ray_path figures (about +-0.1).
2. Items/s, with and without the budget, and their ratio.
3. The budget's own work per request, alone: a request's worst case and its reservation
   and settlement in a ledger (microseconds), and the gateway calls per item on Ray
   (a holder leases slices: never one call per request).

    python benchmarks/bench_budget.py
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any

import ray
from _procs import CpuMeter, pids_matching
from _sim_process import sim_process

import raygent
from raygent import Budget, OpenAIModel, Pricing, UserMessage
from raygent.actors import RayOptions, gateway_names, ray_backend
from raygent.models import ModelOptions
from raygent.seams.contract import Backend
from raygent.seams.local import LOCAL
from raygent.spend import LocalLedger, amount_of, worst_case

PRICING = Pricing(input_per_mtok=2.5, output_per_mtok=10.0)
NAMESPACE = "raygent-bench-budget"
ROOMY = Budget(usd=1e9)  # never binds: the same requests are sent with it and without


def agent_on(base: str, backend: Backend) -> raygent.Agent:
    model = OpenAIModel(
        "sim-gpt", base_url=base + "/v1", api_key="sk-bench", pricing=PRICING, max_concurrency=64
    )
    return raygent.agent(model=model, model_options={"max_tokens": 64}, backend=backend)


def items(count: int, tag: str) -> list[str]:
    return [f"{tag} question {i}: what is the capital of France?" for i in range(count)]


class Bench:
    def __init__(self, args: argparse.Namespace, base: str) -> None:
        self.args = args
        self.agents = {
            "local": agent_on(base, LOCAL),
            "ray": agent_on(base, ray_backend(RayOptions(namespace=NAMESPACE))),
        }
        self.runs = 0

    async def batch(self, kind: str, count: int, budget: Budget | None) -> Any:
        self.runs += 1
        options: dict[str, Any] = {"concurrency": self.args.concurrency, "progress": False}
        if budget is not None:
            options["budget"] = budget
        if kind == "ray":
            options["runners"] = 1
        result = await raygent.batch(self.agents[kind], items(count, f"r{self.runs}"), **options)
        assert result.report.succeeded == count, result.report
        return result


async def measured(bench: Bench, kind: str, budget: Budget | None) -> tuple[float, float]:
    """(CPU ms per item, items/s) of one batch."""
    me = __import__("os").getpid()
    meter = CpuMeter(me, pids_matching(b"raygent\x00sim"))
    count = bench.args.items
    meter.start()
    driver = time.process_time()
    result = await bench.batch(kind, count, budget)
    if kind == "local":
        cpu = (time.process_time() - driver) * 1000 / count
    else:
        cpu = sum(meter.split().values()) * 1000 / count
    return cpu, result.report.throughput


async def compare(bench: Bench) -> None:
    args = bench.args
    figures: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    for kind in ("local", "ray"):
        for budget in (None, ROOMY):  # warm up: pools, runners, the gateway
            await bench.batch(kind, args.concurrency * 2, budget)
    for round_ in range(args.rounds):
        for kind in ("local", "ray"):
            # Each round swaps which goes first (a machine shared with other work drifts).
            for budget in (None, ROOMY) if round_ % 2 == 0 else (ROOMY, None):
                cpu, rate = await measured(bench, kind, budget)
                figures.setdefault((kind, budget is not None), []).append((cpu, rate))
    print(
        f"\n1-2. {args.items} items a batch, {args.concurrency} in flight, zero latency; "
        f"median of {args.rounds} interleaved rounds\n"
    )
    print(f"{'backend':8} {'budget':7} {'CPU ms/item':>12} {'items/s':>8}")
    med: dict[tuple[str, bool], tuple[float, float]] = {}
    for (kind, held), values in sorted(figures.items()):
        cpu = statistics.median(v[0] for v in values)
        rate = statistics.median(v[1] for v in values)
        med[(kind, held)] = (cpu, rate)
        print(f"{kind:8} {'yes' if held else 'no':7} {cpu:12.3f} {rate:8.0f}")
    for kind in ("local", "ray"):
        cpu = med[(kind, True)][0] / med[(kind, False)][0]
        rate = med[(kind, True)][1] / med[(kind, False)][1]
        within = "ok" if cpu <= 1.1 else "MISSED"
        print(
            f"{kind}: budget / none CPU per item {cpu:.2f} (goal <= 1.1: {within}), "
            f"items/s {rate:.2f}"
        )


async def alone(bench: Bench) -> None:
    """The budget's own work per request, and the gateway calls per item on Ray."""
    model = bench.agents["local"].model
    messages = [UserMessage(content="what is the capital of France? " * 4)]
    options = ModelOptions(max_tokens=64)
    ledger = LocalLedger(ROOMY)
    actual = amount_of(raygent.Usage(requests=1, input_tokens=30, output_tokens=20))
    rounds = 20_000
    start = time.perf_counter()
    for _ in range(rounds):
        amount, _pricing = worst_case(model, messages, options)
        await ledger.reserve(amount)
        ledger.settle(amount, actual)
    per = (time.perf_counter() - start) * 1e6 / rounds
    print(f"\n3. a request's worst case, reservation and settlement: {per:.1f} us")
    gateway = ray.get_actor(gateway_names(1)[0], namespace=NAMESPACE)
    before = (await gateway.stats.remote())["syncs"]
    await bench.batch("ray", bench.args.items, ROOMY)
    calls = (await gateway.stats.remote())["syncs"] - before
    print(
        f"   gateway calls per item on Ray with a budget (lease renewals and budget "
        f"slices together): {calls / bench.args.items:.4f}"
    )


async def main_async(args: argparse.Namespace) -> None:
    with sim_process() as base:
        bench = Bench(args, base)
        await compare(bench)
        await alone(bench)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    # A local Ray of its own, on free ports (never Redis's 6379).
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        asyncio.run(main_async(args))
    finally:
        ray.shutdown()
    print("\nreproduce: python benchmarks/bench_budget.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()

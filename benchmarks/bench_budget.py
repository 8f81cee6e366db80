"""What a budget costs per request: the same batch with and without a job budget, on the
local backend and on Ray (batch runners, the gateway keeping the budget).

An agent with declared pricing answers `--items` questions with `raygent.batch` at zero
latency (the simulator in its own process), with no budget and with a job budget too
large to bind (so both batches send the same requests); rounds interleaved.

1. CPU per item: locally this process's; on Ray every process of the tree (driver,
   runners, gateway, Ray's own), and by process. Each round runs the job without a
   budget twice and with one once: the two without measure the noise (A/A), the one
   with is set against their mean. Goal: budget / none within the noise (the median
   A/A distance, or 0.1, the spread of the bench_ray_path figures, if larger).
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
from raygent.budgets import LocalBudgetLedger, amount_of, worst_case
from raygent.models import ModelOptions
from raygent.seams.contract import Backend
from raygent.seams.local import LOCAL

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


async def measured(bench: Bench, kind: str, budget: Budget | None) -> dict[str, float]:
    """CPU ms per item of one batch ("all"; on Ray also each kind of process), and
    its items/s ("rate")."""
    me = __import__("os").getpid()
    meter = CpuMeter(me, pids_matching(b"raygent\x00sim"))
    count = bench.args.items
    meter.start()
    driver = time.process_time()
    result = await bench.batch(kind, count, budget)
    figures: dict[str, float] = {"rate": result.report.throughput}
    if kind == "local":
        figures["all"] = (time.process_time() - driver) * 1000 / count
    else:
        split = meter.split()
        figures["all"] = sum(split.values()) * 1000 / count
        for name, seconds in split.items():
            figures[name] = seconds * 1000 / count
    return figures


# Each round runs the job three times: without a budget (twice) and with one, in an
# order that turns each round. The two runs without are the noise (A/A); the run with
# is set against their mean (A/B).
ORDERS = (("none", "budget", "none2"), ("budget", "none2", "none"), ("none2", "none", "budget"))


async def compare(bench: Bench) -> None:
    args = bench.args
    runs: dict[str, list[dict[str, dict[str, float]]]] = {"local": [], "ray": []}
    for kind in ("local", "ray"):
        for budget in (None, ROOMY):  # warm up: pools, runners, the gateway
            await bench.batch(kind, args.concurrency * 2, budget)
    for round_ in range(args.rounds):
        for kind in ("local", "ray"):
            round_runs: dict[str, dict[str, float]] = {}
            for name in ORDERS[round_ % len(ORDERS)]:
                budget = ROOMY if name == "budget" else None
                round_runs[name] = await measured(bench, kind, budget)
            runs[kind].append(round_runs)
    print(
        f"\n1-2. {args.items} items a batch, {args.concurrency} in flight, zero latency; "
        f"{args.rounds} rounds, each: twice without a budget, once with, order turning\n"
    )
    print(f"{'backend':8} {'budget':7} {'CPU ms/item':>12} {'items/s':>8}")
    for kind, rounds in runs.items():
        for name in ("none", "budget"):
            cpu = statistics.median(r[name]["all"] for r in rounds)
            rate = statistics.median(r[name]["rate"] for r in rounds)
            print(f"{kind:8} {'yes' if name == 'budget' else 'no':7} {cpu:12.3f} {rate:8.0f}")
    for kind, rounds in runs.items():
        ab = [r["budget"]["all"] / ((r["none"]["all"] + r["none2"]["all"]) / 2) for r in rounds]
        aa = [r["none2"]["all"] / r["none"]["all"] for r in rounds]
        rate = statistics.median(
            r["budget"]["rate"] / ((r["none"]["rate"] + r["none2"]["rate"]) / 2) for r in rounds
        )
        noise = statistics.median(abs(x - 1) for x in aa)
        extra = statistics.median(ab) - 1
        within = "ok" if extra <= max(noise, 0.1) else "MISSED"
        print(
            f"{kind}: budget / none CPU per item {statistics.median(ab):.2f}"
            f" (rounds {min(ab):.2f}-{max(ab):.2f}); none / none {statistics.median(aa):.2f}"
            f" (rounds {min(aa):.2f}-{max(aa):.2f}, noise +-{noise:.2f});"
            f" goal: within max(noise, 0.1): {within}; items/s {rate:.2f}"
        )
    parts = sorted({p for r in runs["ray"] for p in r["none"] if p not in ("all", "rate")})
    print("\n   on Ray, CPU ms per item by process (median; none, none again, budget):")
    for part in parts:
        none, again, held = (
            statistics.median(r[name].get(part, 0.0) for r in runs["ray"])
            for name in ("none", "none2", "budget")
        )
        print(f"   {part:24} {none:6.3f}  {again:6.3f}  {held:6.3f}")


async def alone(bench: Bench) -> None:
    """The budget's own work per request, and the gateway calls per item on Ray."""
    model = bench.agents["local"].model
    messages = [UserMessage(content="what is the capital of France? " * 4)]
    options = ModelOptions(max_tokens=64)
    ledger = LocalBudgetLedger(ROOMY)
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

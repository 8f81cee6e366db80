"""Pay the least that meets the deadline (`raygent.batch(..., deadline=)`), on the
simulator with times scaled down (a provider batch takes about a second, a deadline is
tens of seconds), on each backend.

Each case first runs `raygent.estimate(..., deadline=)` on a sample of the job (what a
user does first: it learns the online latencies into the route's store), then the job,
and prints its figures beside all-online (the same trips at the standard tier):

1. a deadline a batch meets: cost <= 0.52x all-online, every item by the deadline;
2. every batch stalls (never answered): every item still by the deadline (the batch
   cancelled at its cutoff, its items answered online), cost below all-online;
3. batches late (they take 8 s, the route expects 1, the deadline is 11 s): cancelled
   at the cutoff, what they answered kept, the rest online; every item by the deadline;
4. a deadline too tight for a batch: flex or standard chosen from the start (no batch);

and in every case what was paid twice (a line answered by its batch after it was sent
online): goal <= 2% of the items.

    python benchmarks/bench_deadline.py [--items 300] [--backend local|ray|both]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import raygent
from raygent.seams.contract import Backend
from raygent.seams.local import LOCAL
from raygent.sim import BatchTimes, Latency, ServiceTiers, serve
from raygent.stores import SQLiteStore

PRICING = raygent.Pricing(input_per_mtok=0.15, output_per_mtok=0.60)
TUNED = raygent.ProviderBatch(gather_seconds=0.3, poll_seconds=0.1)
EXPECTED_BATCH = 1.0  # what the route expects of a batch before it has seen one (s)


@dataclass(frozen=True)
class Case:
    name: str
    batch: BatchTimes
    deadline: float  # seconds


CASES = (
    Case("a deadline a batch meets", BatchTimes(median_seconds=1.0, spread=0.3, seed=1), 25.0),
    Case("every batch stalls", BatchTimes(median_seconds=1.0, stall_rate=1.0), 25.0),
    Case("batches late (8 s)", BatchTimes(median_seconds=8.0, spread=0.1, seed=2), 11.0),
    Case("too tight for a batch", BatchTimes(median_seconds=1.0, spread=0.3), 4.0),
)


async def run_case(case: Case, items: int, backend: Backend, folder: Path) -> dict[str, Any]:
    tiers = ServiceTiers(flex_latency=2.0)
    async with serve(
        batch_times={"openai": case.batch}, latency=Latency(fixed_ms=40), tiers=tiers
    ) as sim:
        model = raygent.OpenAIModel(
            "gpt-4o-mini",
            base_url=sim.openai_base_url,
            api_key="sk-bench",
            pricing=PRICING,
            max_concurrency=32,
        )
        bot = raygent.agent(model=model, backend=backend)
        store = SQLiteStore(folder / f"timings-{backend.name}-{CASES.index(case)}.db")
        route = raygent.Route(store=store, batch_seconds=EXPECTED_BATCH)
        work = [{"input": f"question {i}", "key": i} for i in range(items)]
        deadline = timedelta(seconds=case.deadline)
        guess = await raygent.estimate(
            bot, work, sample=20, deadline=deadline, route=route, provider_batch=TUNED
        )
        sim.reset()
        sink = folder / f"{backend.name}-{case.name.replace(' ', '-')}.jsonl"
        started = time.time()
        result = await raygent.batch(
            bot,
            work,
            deadline=deadline,
            route=route,
            provider_batch=TUNED,
            sink=sink,
            progress=False,
        )
        took = time.time() - started
        stats = sim.stats()
        await store.aclose()
    report = result.report
    summary = report.route
    assert summary is not None and report.succeeded == items, report
    written = len(sink.read_text().splitlines())
    return {
        "plan": guess.route.line() if guess.route is not None else "",
        "items": summary.items,
        "moved": summary.moved,
        "ratio": (summary.cost or 0.0) / (summary.online_cost or float("nan")),
        "met": summary.met,
        "took": took,
        "paid_twice": summary.paid_twice / items,
        "batch_calls": stats.batch_calls,
        "written_once": written == items,
    }


def backends(which: str) -> list[Backend]:
    chosen: list[Backend] = []
    if which in ("local", "both"):
        chosen.append(LOCAL)
    if which in ("ray", "both"):
        chosen.append(raygent.init("ray"))
    return chosen


def _warm(backend: Backend) -> None:
    """Ray's one-time start (runners, the gateway) paid before the clocks start."""
    with serve() as sim:
        model = raygent.OpenAIModel("m", base_url=sim.openai_base_url, api_key="k")
        bot = raygent.agent(model=model, backend=backend)
        raygent.batch_sync(bot, ["warm"] * 16, progress=False)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--backend", choices=["local", "ray", "both"], default="both")
    args = parser.parse_args()
    command = f"python benchmarks/bench_deadline.py --items {args.items} --backend {args.backend}"
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends(args.backend):
            if backend.name == "ray":
                await asyncio.to_thread(_warm, backend)
            print(f"\n== {backend.name}: {args.items} items ==")
            for case in CASES:
                try:
                    figures = await run_case(case, args.items, backend, Path(tmp))
                except raygent.errors.DeadlineError as refused:
                    print(f"{case.name:26} deadline {case.deadline:4.0f} s | refused: {refused}")
                    continue
                print(
                    f"{case.name:26} deadline {case.deadline:4.0f} s | items {figures['items']}"
                    f" | moved {figures['moved'] or '-'} | cost {figures['ratio']:.3f}x"
                    f" all-online | done in {figures['took']:.1f} s, deadline"
                    f" {'met' if figures['met'] else 'MISSED'} | paid twice"
                    f" {figures['paid_twice']:.1%} | batches {figures['batch_calls'] > 0}"
                    f" | sink once {figures['written_once']}"
                )
                print(f"{'':26} estimate: {figures['plan']}")
    print(f"\ngoals: cost <= 0.52x with a deadline a batch meets; below 1x when batches stall;"
          f" every deadline met; paid twice <= 2%\n{command}")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())

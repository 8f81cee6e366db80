"""Items/s of `raygent.batch` against a hand-written asyncio + aiohttp loop, and the
driver's peak memory for a million items streamed to a sink.

Throughput: the simulator runs in its own process at `--latency-ms`; each client keeps
`--bound` requests in flight until `--items` are done. Clients:

- the hand loop: `--bound` aiohttp workers posting the OpenAI body, keeping each reply
  (the baseline);
- raygent batch of an agent (OpenAIModel against the simulator, the local backend);
- raygent batch of a plain async callable doing the hand loop's request (the batch core
  alone, without the agent run);
- a hand loop of `agent.execute` (the agent run alone, without raygent.batch), so that
  what batch costs and what the agent run costs can be told apart.

Rounds are interleaved so machine noise hits every client alike; the median round is
reported, with the ideal (bound / latency) and the simulator's peak in-flight count
over every raygent round (it must never pass the bound). Target: raygent batch of the
agent >= 0.85 of the hand loop.

Memory: a child process streams `--memory-items` items from a generator through
`raygent.batch` to a JSONL sink and reports its peak RSS; a run of a tenth as many
items shows that the peak does not grow with the item count.

    python benchmarks/batch_throughput.py

`--backend ray` runs the batch of the agent on Ray batch runner actors (their model calls
through the model gateways) and the hand loop of `agent.execute` through the gateways from
this process; the batch of a plain callable is left out there (it holds this process's
aiohttp session, which cannot travel to a runner).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp

# The script's own folder is on sys.path when run as `python benchmarks/...`.
from _sim_process import sim_process, sim_stats

import raygent
from raygent import OpenAIModel, UserMessage
from raygent._batch import batch

PROMPT = "Say something short."
JSON = {"content-type": "application/json"}
Client = Callable[[int], Awaitable[float]]  # items -> items/s
HAND = "hand-written asyncio + aiohttp loop"
BATCH_AGENT = "raygent.batch(agent)"
HAND_AGENT = "hand loop of agent.execute"


def hand_loop(call: Callable[[], Awaitable[object]], bound: int) -> Client:
    async def run(items: int) -> float:
        # Keeps each reply in place, as raygent.batch does without a sink.
        results: list[object] = [None] * items
        feed = iter(range(items))

        async def worker() -> None:
            for index in feed:
                results[index] = await call()

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(bound)))
        return items / (time.perf_counter() - start)

    return run


def raygent_batch(executable: Any, bound: int) -> Client:
    async def run(items: int) -> float:
        result = await batch(executable, (PROMPT for _ in range(items)), concurrency=bound)
        assert result.ok and result.report.succeeded == items, result.report
        return result.report.throughput

    return run


async def throughput(args: argparse.Namespace, base: str) -> None:
    model = OpenAIModel(
        "sim-gpt", base_url=base + "/v1", api_key="sk-bench", max_concurrency=args.bound
    )
    agent = raygent.agent(model=model)
    body = json.dumps(model.request_body([UserMessage(content=PROMPT)], None, stream=False))
    url = base + "/v1/chat/completions"
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def one_request(_: object = None) -> object:
        async with session.post(url, data=body.encode(), headers=JSON) as response:
            response.raise_for_status()
            return json.loads(await response.read())

    async def one_run() -> object:
        result = await agent.execute(PROMPT)
        assert result.ok, result.error
        return result

    clients: dict[str, Client] = {
        HAND: hand_loop(one_request, args.bound),
        BATCH_AGENT: raygent_batch(agent, args.bound),
        "raygent.batch(async callable)": raygent_batch(one_request, args.bound),
        HAND_AGENT: hand_loop(one_run, args.bound),
    }
    if args.backend == "ray":
        del clients["raygent.batch(async callable)"]
    for client in clients.values():  # warm up connections and caches
        await client(args.bound * 2)
    rates: dict[str, list[float]] = {name: [] for name in clients}
    cpu: dict[str, list[float]] = {name: [] for name in clients}
    peak = 0
    for _ in range(args.rounds):
        for name, client in clients.items():
            async with session.post(base + "/sim/reset"):
                pass
            started = time.process_time()
            rates[name].append(await client(args.items))
            cpu[name].append((time.process_time() - started) * 1000 / args.items)
            if name.startswith("raygent"):
                peak = max(peak, (await sim_stats(base, http=session))["peak_in_flight"])
    statuses = (await sim_stats(base, http=session))["by_status"]
    await session.close()
    medians = {
        name: (statistics.median(rates[name]), statistics.median(cpu[name])) for name in rates
    }
    report(args, medians, peak, statuses)


def report(
    args: argparse.Namespace,
    median: dict[str, tuple[float, float]],
    peak: int,
    statuses: dict[str, int],
) -> None:
    ideal = args.bound * 1000 / args.latency_ms
    baseline = median[HAND][0]
    print(
        f"\nbound {args.bound}, {args.latency_ms} ms latency, {args.items} items a round, "
        f"median of {args.rounds} interleaved rounds; ideal {ideal:.0f} items/s\n"
    )
    print(f"{'client':38} {'items/s':>8} {'CPU ms/item':>12} {'vs hand loop':>13} {'vs ideal':>9}")
    for name, (rate, cpu) in median.items():
        print(f"{name:38} {rate:8.0f} {cpu:12.2f} {rate / baseline:13.2f} {rate / ideal:9.2f}")
    ratio = median[BATCH_AGENT][0] / baseline
    verdict = "ok" if ratio >= 0.85 else "BELOW TARGET"
    print(f"\nratio raygent.batch(agent) / hand loop: {ratio:.2f} (target >= 0.85: {verdict})")
    own = median[BATCH_AGENT][0] / median[HAND_AGENT][0]
    print(f"ratio raygent.batch(agent) / hand loop of agent.execute: {own:.2f} (what batch costs)")
    bound_ok = "ok" if peak <= args.bound else "ABOVE THE BOUND"
    print(f"simulator peak in flight over raygent rounds: {peak} (bound {args.bound}: {bound_ok})")
    print(f"simulator responses by status (last round): {statuses}")


# -- memory --------------------------------------------------------------------------------


async def _memory_child(items: int, sink: str) -> None:
    raygent.init("local")  # the driver's own memory: the batch core and the sink

    def rows() -> Iterator[dict[str, int]]:
        for n in range(items):
            yield {"n": n}

    async def work(row: dict[str, int]) -> int:
        return row["n"] * 2

    start = time.perf_counter()
    result = await batch(work, rows(), concurrency=64, sink=sink)
    elapsed = time.perf_counter() - start
    assert result.report.succeeded == items and result.items == [] and result.data == []
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"items": items, "peak_rss_mb": peak_mb, "seconds": elapsed}))


def memory(items: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        sink = str(Path(folder) / "out.jsonl")
        out = subprocess.run(
            [sys.executable, __file__, "--memory-child", str(items), sink],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        with open(sink, "rb") as written:
            lines = sum(chunk.count(b"\n") for chunk in iter(lambda: written.read(1 << 20), b""))
    found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    assert lines == items, (lines, items)
    return found


def memory_report(items: int) -> None:
    print("\ndriver peak memory, a generator of items streamed to a JSONL sink:")
    for count in (items // 10, items):
        found = memory(count)
        rate = found["items"] / found["seconds"]
        print(
            f"{found['items']:>9} items: peak RSS {found['peak_rss_mb']:6.0f} MB, "
            f"{found['seconds']:6.1f} s ({rate:,.0f} items/s of a no-op callable)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--bound", type=int, default=64)
    parser.add_argument("--latency-ms", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", choices=["local", "ray"], default="local")
    parser.add_argument("--memory-items", type=int, default=1_000_000, help="0 skips it")
    parser.add_argument("--memory-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        asyncio.run(_memory_child(int(args.memory_child[0]), args.memory_child[1]))
        return
    # With "ray", the batch of the agent runs on batch runners, model calls via gateways.
    raygent.init(args.backend)
    with sim_process("--latency-ms", str(args.latency_ms)) as base:
        asyncio.run(throughput(args, base))
    if args.memory_items:
        memory_report(args.memory_items)
    print("\nreproduce: python benchmarks/batch_throughput.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()

"""`raygent.data.map` beside `raygent.batch` and ray.data.llm's HTTP processor.

The same dataset (`--rows` questions, written as `--files` Parquet files) is answered
three ways in one process, against the simulator in its own process (`--latency-ms`
per reply), with the same concurrency and the same gateway bound (`--bound`):

1. `raygent.batch` on Ray: the driver reads the dataset and feeds the batch runners;
2. `raygent.data.map`: a Ray Data pipeline, read_parquet -> repartition -> map ->
   write_parquet. Ray Data reads small files as one block, and `override_num_blocks`
   does not split them (measured), so the pipeline repartitions into `--blocks` blocks,
   as a user would, to spread the rows over the actors (a block is one task on one
   actor: a few large ones leave an actor idle at the end while another finishes);
3. ray.data.llm's `HttpRequestProcessor` (build_processor) posting the same chat
   completions to the simulator's OpenAI endpoint (`--http-rows` rows: it is slow).

Both raygent paths are warmed once on a small dataset first (worker processes, Ray
Data's own actors), then run `--rounds` times, alternating run by run. Each prints
items/s (wall time, from the pipeline's start to its output written). A data.map job
still starts its own actor processes (Ray Data's actor pool), a few seconds that the
batch runners, kept by the driver, do not pay again: the default `--rows` makes it a
bulk job, where that start is a small part. Targets: data.map >= 0.85 x batch, and
>= 10 x the HTTP processor.

    python benchmarks/bench_data_map.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import ray
import ray.data
from _sim_process import sim_process

import raygent
from raygent import OpenAIModel
from raygent.actors import RayOptions, ray_backend

KEY = "sk-bench-000000"


def write_dataset(folder: Path, rows: int, files: int) -> Path:
    folder.mkdir(parents=True)
    per = rows // files
    for part in range(files):
        ids = list(range(part * per, (part + 1) * per))
        pq.write_table(
            pa.table({"id": ids, "input": [f"question {i}" for i in ids]}),
            folder / f"part-{part}.parquet",
        )
    return folder


def bench_batch(agent: Any, source: Path, out: Path, concurrency: int) -> float:
    rows = pq.read_table(source).to_pylist()
    started = time.perf_counter()
    result = asyncio.run(
        raygent.batch(
            agent, rows, concurrency=concurrency, sink=str(out / "batch.parquet"), progress=False
        )
    )
    elapsed = time.perf_counter() - started
    assert result.ok, [str(i.error) for i in result.items if not i.ok][:3]
    return len(rows) / elapsed


def bench_data_map(agent: Any, source: Path, out: Path, concurrency: int, blocks: int) -> float:
    started = time.perf_counter()
    dataset = raygent.data.map(
        ray.data.read_parquet(str(source)).repartition(blocks), agent, concurrency=concurrency
    )
    dataset.write_parquet(str(out / "data_map"))
    elapsed = time.perf_counter() - started
    table = pq.read_table(out / "data_map")
    statuses = set(table["result_status"].to_pylist())
    assert statuses == {"completed"}, statuses
    return table.num_rows / elapsed


def bench_http_processor(base: str, source: Path, out: Path, concurrency: int) -> float:
    from ray.data.llm import HttpRequestProcessorConfig, build_processor

    config = HttpRequestProcessorConfig(
        url=f"{base}/v1/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        qps=None,
        concurrency=1,
        batch_size=64,
    )
    processor = build_processor(
        config,
        preprocess=lambda row: {
            "payload": {
                "model": "sim-gpt",
                "messages": [{"role": "user", "content": row["input"]}],
            }
        },
        postprocess=lambda row: {
            "id": row["id"],
            "text": row["http_response"]["choices"][0]["message"]["content"],
        },
    )
    started = time.perf_counter()
    processor(ray.data.read_parquet(str(source))).write_parquet(str(out / "http"))
    elapsed = time.perf_counter() - started
    return pq.read_table(out / "http").num_rows / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=40000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--blocks", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=50)
    parser.add_argument("--bound", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--http-rows", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ray.init(include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    batch: list[float] = []
    data_map: list[float] = []
    with (
        sim_process("--latency-ms", str(args.latency_ms)) as base,
        tempfile.TemporaryDirectory() as tmp,
    ):
        work = Path(tmp)
        source = write_dataset(work / "in", args.rows, args.files)
        small = write_dataset(work / "in_small", args.http_rows, args.files)
        model = OpenAIModel(
            "sim-gpt", base_url=f"{base}/v1", api_key=KEY, max_concurrency=args.bound
        )
        agent = raygent.agent(model=model, backend=ray_backend(RayOptions()))
        # Warm both paths once (worker processes, Ray Data's own actors).
        bench_batch(agent, small, work / "warm_batch", args.concurrency)
        bench_data_map(agent, small, work / "warm_map", args.concurrency, args.blocks)
        for n in range(args.rounds):
            batch.append(bench_batch(agent, source, work / f"batch_{n}", args.concurrency))
            data_map.append(
                bench_data_map(agent, source, work / f"map_{n}", args.concurrency, args.blocks)
            )
            print(
                f"round {n + 1}: batch {batch[-1]:.1f} items/s, data.map {data_map[-1]:.1f} "
                f"({data_map[-1] / batch[-1]:.2f}), load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        http = bench_http_processor(base, small, work, args.concurrency)
    print(
        f"rows={args.rows} (http: {args.http_rows}) latency={args.latency_ms}ms "
        f"concurrency={args.concurrency} bound={args.bound} rounds={args.rounds}"
    )
    for name, rates in (("raygent.batch", batch), ("raygent.data.map", data_map)):
        print(
            f"{name:36s} {median(rates):9.1f} items/s (median; {min(rates):.1f}-{max(rates):.1f})"
        )
    print(f"{'ray.data.llm HttpRequestProcessor':36s} {http:9.1f} items/s")
    ratios = [m / b for m, b in zip(data_map, batch, strict=True)]
    print(
        f"data.map / batch = {median(ratios):.2f} (median of the rounds; "
        f"{min(ratios):.2f}-{max(ratios):.2f}; target >= 0.85)"
    )
    print(f"data.map / http processor = {median(data_map) / http:.1f} x (target >= 10)")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(
        "reproduce: python benchmarks/bench_data_map.py "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items())
    )


if __name__ == "__main__":
    main()

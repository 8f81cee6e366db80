"""`raygent.data.map` beside `raygent.batch` and ray.data.llm's HTTP processor.

The same dataset (`--rows` questions, written as Parquet) is answered three ways in one
run, against the simulator in its own process (`--latency-ms` per reply):

1. `raygent.batch` on Ray: the driver reads the dataset and feeds the batch runners;
2. `raygent.data.map`: a Ray Data pipeline, read_parquet -> map -> write_parquet;
3. ray.data.llm's `HttpRequestProcessor` (build_processor) posting the same chat
   completions to the simulator's OpenAI endpoint, read_parquet -> processor ->
   write_parquet.

Each prints items/s (wall time, the pipeline's start to its output written). Targets:
data.map >= 0.85 x batch, and >= 10 x the HTTP processor. Model calls of the first two
go through raygent's gateway (bound `--bound`).

    python benchmarks/bench_data_map.py
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
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
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--latency-ms", type=float, default=50)
    parser.add_argument("--bound", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--http-rows", type=int, default=1000)
    args = parser.parse_args()
    ray.init(include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
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
        # Warm both paths once (actor and worker starts are not the subject).
        bench_batch(agent, small, work / "warm", args.concurrency)
        figures = {
            "raygent.batch": bench_batch(agent, source, work, args.concurrency),
            "raygent.data.map": bench_data_map(agent, source, work, args.concurrency, args.files),
            "ray.data.llm HttpRequestProcessor": bench_http_processor(
                base, small, work, args.concurrency
            ),
        }
    print(
        f"rows={args.rows} (http: {args.http_rows}) latency={args.latency_ms}ms "
        f"concurrency={args.concurrency} bound={args.bound}"
    )
    for name, rate in figures.items():
        print(f"{name:36s} {rate:9.1f} items/s")
    batch, data_map = figures["raygent.batch"], figures["raygent.data.map"]
    http = figures["ray.data.llm HttpRequestProcessor"]
    print(f"data.map / batch = {data_map / batch:.2f} (target >= 0.85)")
    print(f"data.map / http processor = {data_map / http:.1f} x (target >= 10)")
    print(
        "reproduce: python benchmarks/bench_data_map.py "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items())
    )


if __name__ == "__main__":
    main()

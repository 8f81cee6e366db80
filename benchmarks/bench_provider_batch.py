"""Provider batch APIs (`provider_batch=`) against the same job online.

A job of `--items` agent runs with a tool round (two trips an item) runs online, then
through each provider's batch API (OpenAI chat completions, OpenAI responses,
Anthropic message batches, Gemini's batch mode, Bedrock batch inference jobs: their
records in S3 from moto's server in this process), on the simulator in its own process
(so its CPU is not the driver's), on the local backend and, with `--ray`, on Ray (batch
runners).

1. HTTP calls per item besides the lines themselves (uploads, creates, polls,
   downloads, amortised). Goal: <= 0.01 at 2,000 items.
2. The driver's CPU per item, batch against online (this process: on the local backend
   it runs the agents too; on Ray the runners do, and the driver relays their lines to
   the job's one pool), the median of `--rounds` interleaved runs. Goal: <= 1.0x.
3. The cost ratio: the batch job's cost over the same job's online. Goal: 0.5.

    python benchmarks/bench_provider_batch.py [--items 2000] [--ray] [--rounds 3] [--apis ...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _sim_process import sim_process, sim_stats

import raygent
from raygent import (
    AnthropicModel,
    BedrockModel,
    GeminiModel,
    OpenAIModel,
    OpenAIResponsesModel,
    Pricing,
)
from raygent.models import BedrockBatch
from raygent.seams.contract import Backend
from raygent.seams.local import LOCAL

SCRIPT = str(Path(__file__).with_name("provider_batch_script.yaml"))
PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=2.0)
APIS = ("chat", "responses", "anthropic", "gemini", "bedrock")
BUCKET = "raygent-bench"
# Bedrock's jobs: S3 from moto's server (its URL set by `s3_server`).
S3: dict[str, str] = {}


@contextlib.contextmanager
def s3_server() -> Iterator[None]:
    """moto's S3 server with the bucket, for Bedrock's jobs; the simulator's process
    finds it through botocore's AWS_ENDPOINT_URL_S3."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per S3 request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    S3["url"] = f"http://{host}:{port}"
    os.environ["AWS_ENDPOINT_URL_S3"] = S3["url"]
    keys = {"aws_access_key_id": "AKIABENCH00000000000", "aws_secret_access_key": "x"}
    client = boto3.client("s3", region_name="us-east-1", endpoint_url=S3["url"], **keys)
    client.create_bucket(Bucket=BUCKET)
    client.close()
    try:
        yield
    finally:
        server.stop()


@raygent.tool
def lookup(q: str) -> str:
    """Look a question up."""
    return "found " + q


def model_for(api: str, url: str) -> Any:
    common: dict[str, Any] = {"api_key": "sk-bench", "pricing": PRICING, "max_concurrency": 64}
    if api == "chat":
        return OpenAIModel("gpt-4o-mini", base_url=url + "/v1", **common)
    if api == "responses":
        return OpenAIResponsesModel("gpt-4o-mini", base_url=url + "/v1", **common)
    if api == "bedrock":
        jobs = BedrockBatch(
            s3_uri=f"s3://{BUCKET}/jobs",
            role_arn="arn:aws:iam::123456789012:role/bench",
            endpoint_url=url,
            s3_endpoint_url=S3["url"],
        )
        del common["api_key"]
        return BedrockModel(
            "us.anthropic.claude-haiku-4-5-20251001-v1:0",
            region="us-east-1",
            base_url=url,
            access_key="AKIABENCH00000000000",
            secret_key="bench-secret",
            batch=jobs,
            **common,
        )
    if api == "gemini":
        return GeminiModel("gemini-2.5-flash", base_url=url, **common)
    return AnthropicModel("claude-sonnet-4-5", base_url=url, **common)


async def run(api: str, url: str, items: int, backend: Backend, by_batch: bool) -> dict[str, float]:
    bot = raygent.agent(model=model_for(api, url), tools=[lookup], backend=backend)
    work = [{"input": f"question {i}", "key": i} for i in range(items)]
    options: dict[str, Any] = {"progress": False}
    if by_batch:
        options["provider_batch"] = raygent.ProviderBatch(gather_seconds=1.0, poll_seconds=0.05)
    else:
        options["concurrency"] = 64
    before = await sim_stats(url)
    cpu, wall = time.process_time(), time.perf_counter()
    result = await raygent.batch(bot, work, **options)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    after = await sim_stats(url)
    assert result.report.succeeded == items, result.report.errors
    cost = result.usage.cost
    return {
        "cpu_per_item_ms": cpu / items * 1000,
        "wall_s": wall,
        "cost": cost.total if cost is not None else float("nan"),
        "batch_calls": after["batch_calls"] - before["batch_calls"],
        "lines": after["batch_lines"] - before["batch_lines"],
        "online": (after["requests"] - after["batch_calls"])
        - (before["requests"] - before["batch_calls"]),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--ray", action="store_true", help="also on Ray (batch runners)")
    parser.add_argument("--rounds", type=int, default=3, help="median of this many runs")
    parser.add_argument("--apis", nargs="+", choices=APIS, default=list(APIS))
    args = parser.parse_args()
    backends: list[tuple[str, Backend]] = [("local", LOCAL)]
    if args.ray:
        from raygent.actors import ray_backend

        backends.append(("ray", ray_backend()))
    print(f"{args.items} items, a tool round each (2 trips); simulator in its own process")
    header = "backend  api        calls/item  lines/item  CPU ms/item batch/online  cost ratio"
    print(header)
    with contextlib.ExitStack() as stack:
        if "bedrock" in args.apis:
            stack.enter_context(s3_server())
        url = stack.enter_context(sim_process("--script", SCRIPT))
        for name, backend in backends:
            for api in args.apis:
                onlines, batches = [], []
                for _ in range(args.rounds):  # interleaved: the machine's noise hits both
                    onlines.append(await run(api, url, args.items, backend, by_batch=False))
                    batches.append(await run(api, url, args.items, backend, by_batch=True))
                assert all(b["online"] == 0 for b in batches), batches
                online_cpu = statistics.median(o["cpu_per_item_ms"] for o in onlines)
                batch_cpu = statistics.median(b["cpu_per_item_ms"] for b in batches)
                batched = batches[-1]
                calls = batched["batch_calls"] / args.items
                lines = batched["lines"] / args.items
                cost_ratio = batched["cost"] / onlines[-1]["cost"]
                print(
                    f"{name:8} {api:10} {calls:10.4f}  {lines:10.1f}"
                    f"  {batch_cpu:5.2f} / {online_cpu:5.2f} = {batch_cpu / online_cpu:4.2f}x"
                    f"  {cost_ratio:10.3f}"
                )
    print("goals: calls/item <= 0.01, CPU batch/online <= 1.0x, cost ratio 0.5")
    print("reproduce: python benchmarks/bench_provider_batch.py --items", args.items,
          "--ray" if args.ray else "", "--apis", *args.apis)  # fmt: skip


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

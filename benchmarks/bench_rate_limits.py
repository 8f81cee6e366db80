"""Rate limits held: a job of one-trip items against the simulator (in its own process)
enforcing a rate with the providers' headers and 429s (issues #39, #44).

The simulator enforces each per-minute limit over sliding windows of `--window` seconds
(default 1: at most a second's share in any one second, whenever in it requests come, as
OpenAI documents per-minute limits "enforced over shorter periods"; `--window 0`: the
simulator's refilled buckets instead) and states the per-minute limits in its
`x-ratelimit-*` headers. Three cases, each a fresh simulator:
- rpm: 1,200 requests a minute; the model configures it
  (`RateLimit(requests_per_minute=1200)`). Holds: every item done, 429s <= 1% of
  requests, throughput >= 0.9 of the limit.
- tpm: 60,000 tokens a minute counted as prompt + max_tokens (200); configured. Holds:
  429s <= 1%, tokens admitted per second >= 0.8 of the limit's.
- learnt: the rpm limit, nothing configured on the model: learnt from the headers.
  Holds: 429s <= 1%, throughput >= 0.9 of the limit.

    python benchmarks/bench_rate_limits.py [--items 400] [--concurrency 64] [--window 1]
        [--backend local|ray|all] [--drivers 3] [--cases rpm,tpm,learnt]

`--backend ray` runs the same job on Ray (the gateway's leases hold the rate there), by
one driver or `--drivers N` driver processes joining one Ray the benchmark starts;
`--backend all` runs locally, on Ray, and on Ray with three drivers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

from _sim_process import sim_process, sim_stats

import raygent
from raygent import OpenAIModel, RateLimit

RPM = 1200
TPM = 60_000
MAX_TOKENS = 200


async def _job(base: str, limit: RateLimit | None, items: int, concurrency: int, **kw: Any) -> Any:
    model = OpenAIModel("sim-gpt", base_url=base + "/v1", api_key="sk-bench", rate_limit=limit)
    agent = raygent.agent(model=model, model_options={"max_tokens": MAX_TOKENS}, **kw)
    await sim_stats(base, reset=True)
    started = time.perf_counter()
    result = await raygent.batch(
        agent,
        [f"item {i}" for i in range(items)],
        concurrency=concurrency,
        retry=raygent.Retry(attempts=6, base_delay=0.5),
        progress=False,
    )
    seconds = time.perf_counter() - started
    return result, seconds, await sim_stats(base)


def window_args(window: float) -> list[str]:
    """The simulator's arguments for `--window` (0: its buckets)."""
    return ["--window-seconds", str(window)] if window else []


def _case(name: str, sim_args: list[str], limit: RateLimit | None, args: Any) -> dict[str, Any]:
    with sim_process(*sim_args, *window_args(args.window)) as base:
        result, seconds, stats = asyncio.run(_job(base, limit, args.items, args.concurrency))
    report = result.report
    limited = sum(stats.get("rate_limited", {}).values())
    requests = stats["admitted_requests"] + limited
    row = {
        "case": name,
        "done": report.succeeded,
        "items": args.items,
        "requests": requests,
        "429s": limited,
        "share_429": limited / max(requests, 1),
        "req_per_s": stats["admitted_requests"] / seconds,
        "tok_per_s": stats["admitted_tokens"] / seconds,
        "seconds": seconds,
    }
    print(
        f"{name:8} done {row['done']}/{row['items']}  429s {limited} of {requests}"
        f" ({row['share_429']:.1%})  {row['req_per_s']:.1f} req/s"
        f" ({row['req_per_s'] / (RPM / 60):.2f} of {RPM / 60:g})"
        f"  {row['tok_per_s']:.0f} tok/s ({row['tok_per_s'] / (TPM / 60):.2f} of {TPM / 60:g})"
        f"  {seconds:.1f} s",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--backend", choices=["local", "ray", "all"], default="local")
    parser.add_argument("--cases", default="rpm,tpm,learnt")
    parser.add_argument("--drivers", type=int, default=1, help="on Ray: driver processes")
    parser.add_argument("--window", type=float, default=1.0, help="the simulator's window (s)")
    args = parser.parse_args()
    print("command: python benchmarks/bench_rate_limits.py " + " ".join(sys.argv[1:]))
    if args.backend in ("local", "all"):
        _local(args)
    if args.backend == "all":
        for drivers in (1, 3):
            _on_ray(argparse.Namespace(**{**vars(args), "drivers": drivers}))
    elif args.backend == "ray":
        _on_ray(args)


def _local(args: Any) -> None:
    os.environ["RAYGENT_BACKEND"] = "local"
    print(f"load: {os.getloadavg()}  backend: local  window: {args.window:g} s", flush=True)
    cases = args.cases.split(",")
    if "rpm" in cases:
        _case("rpm", ["--rpm", str(RPM)], RateLimit(requests_per_minute=RPM), args)
    if "tpm" in cases:
        _case("tpm", ["--tpm", str(TPM)], RateLimit(tokens_per_minute=TPM), args)
    if "learnt" in cases:
        _case("learnt", ["--rpm", str(RPM)], None, args)


def _on_ray(args: Any) -> None:
    """The same cases on Ray, held through the gateway's leases (`_rates_ray.py`), by
    one driver or `--drivers N` driver processes sharing the limit."""
    import _rates_ray
    import ray

    print(
        f"load: {os.getloadavg()}  backend: ray  drivers: {args.drivers}"
        f"  window: {args.window:g} s",
        flush=True,
    )
    ray.init(address="local", namespace="bench-rates", log_to_driver=False)
    try:
        for case in args.cases.split(","):
            row = _rates_ray.bench(
                argparse.Namespace(
                    case=case,
                    drivers=args.drivers,
                    concurrency=args.concurrency,
                    items=args.items,
                    window=args.window,
                )
            )
            print(row, flush=True)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()

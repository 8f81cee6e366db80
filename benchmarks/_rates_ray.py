"""The Ray half of `bench_rate_limits.py`: rate limits held through the model gateway,
by one driver or by `--drivers N` driver processes sharing one limit.

The simulator runs in its own process and enforces the limit as providers do (over
one-second sliding windows with `--window 1`, else buckets of a second's share; 429 with
retry-after past them, their headers on every reply). Each
driver joins the benchmark's Ray and runs its share of the items at once, at most
`concurrency / drivers` in flight, through `raygent.agent(...).execute` on the Ray
backend (so its requests are admitted under its lease of the gateway's rate). Printed
per case: items done, 429s as a share of requests, and the rate held as a share of the
limit (requests, or admitted tokens for the tokens case), wall time from the first item
to the last, the gateway already up, and the scheduled requests the drivers dropped
because they could not send them in time (`LATE`).

    python benchmarks/_rates_ray.py [--drivers 3] [--case rpm|tpm|learnt]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import ray

sys.path.insert(0, str(Path(__file__).parent))
from _sim_process import sim_process, sim_stats

import raygent
from raygent.actors import RayOptions, ray_backend

KEY = "sk-bench-rates-0000"
RPS = 20  # the limit: 1,200 requests a minute
TOKENS_PER_SECOND = 2000  # 120,000 tokens a minute, against max_tokens=200
CASES: dict[str, dict[str, Any]] = {
    "rpm": {
        "items": 400,
        "sim": ["--rpm", str(RPS * 60)],
        "limit": {"requests_per_minute": RPS * 60},
    },
    "tpm": {
        "items": 200,
        "sim": ["--tpm", str(TOKENS_PER_SECOND * 60)],
        "limit": {"tokens_per_minute": TOKENS_PER_SECOND * 60},
        "max_tokens": 200,
    },
    "learnt": {"items": 400, "sim": ["--rpm", str(RPS * 60)], "limit": None},
}


def _bot(base: str, namespace: str, case: dict[str, Any]) -> raygent.Agent:
    limit = case["limit"]
    model = raygent.OpenAIModel(
        "sim-gpt",
        base_url=base + "/v1",
        api_key=KEY,
        rate_limit=raygent.RateLimit(**limit) if limit else None,
    )
    options = {"max_tokens": case["max_tokens"]} if "max_tokens" in case else None
    backend = ray_backend(RayOptions(namespace=namespace))
    return raygent.agent(model=model, backend=backend, model_options=options)


def dropped(bot: raygent.Agent) -> int:
    """Scheduled requests this process's rate lease dropped, sent too late (`LATE`)."""
    backend = bot.backend
    assert backend is not None
    access = backend.models
    limits = bot.model.limits()  # type: ignore[attr-defined]
    admissions = access.admissions
    admissions = getattr(admissions, "inner", admissions)  # under tenants' fair share
    return int(admissions.rate_lease(limits).stats()["dropped"])


async def _run(bot: raygent.Agent, first: int, count: int, concurrency: int) -> tuple[int, int]:
    """Run items `first`..`first + count` with at most `concurrency` at once; how many
    completed, and how many scheduled requests were dropped meanwhile."""
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> bool:
        async with gate:
            return (await bot.execute(f"item {i}")).ok

    before = dropped(bot)
    done = sum(await asyncio.gather(*(one(first + i) for i in range(count))))
    return done, dropped(bot) - before


def driver(args: argparse.Namespace) -> None:
    """A driver process of its own: join Ray, warm up, say READY, wait for GO (a line
    on stdin), run its items, print RESULT."""
    ray.init(address=args.address, namespace=args.namespace, log_to_driver=False)
    bot = _bot(args.base, args.namespace, CASES[args.case])
    asyncio.run(bot.execute("warm up"))
    print("READY", flush=True)
    sys.stdin.readline()
    started = time.time()  # wall clock: the drivers' spans are compared across processes
    done, late = asyncio.run(_run(bot, args.first, args.items, args.concurrency))
    span = {"done": done, "dropped": late, "started": started, "ended": time.time()}
    print("RESULT " + json.dumps(span), flush=True)


def _drivers(args: argparse.Namespace, base: str, namespace: str, items: int) -> int:
    """Run the case in `args.drivers` processes at once; items done."""
    share, extra = divmod(items, args.drivers)
    procs = []
    first = 0
    for d in range(args.drivers):
        count = share + (1 if d < extra else 0)
        command = [
            sys.executable,
            __file__,
            "--driver",
            *("--address", ray.get_runtime_context().gcs_address),
            *("--namespace", namespace, "--base", base, "--case", args.case),
            *("--first", str(first), "--items", str(count)),
            *("--concurrency", str(max(1, args.concurrency // args.drivers))),
        ]
        first += count
        procs.append(
            subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=os.environ
            )
        )
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
    asyncio.run(sim_stats(base, reset=True))
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    spans = []
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        spans.append(json.loads(out.strip().splitlines()[-1].removeprefix("RESULT ")))
    # From the first driver's first item to the last one's last (not their exits).
    args.elapsed = max(s["ended"] for s in spans) - min(s["started"] for s in spans)
    args.dropped = sum(s["dropped"] for s in spans)
    return sum(s["done"] for s in spans)


def bench(args: argparse.Namespace) -> dict[str, Any]:
    case = CASES[args.case]
    items = args.items or case["items"]
    namespace = f"bench-rates-{os.getpid()}-{args.case}-{args.drivers}"
    window = getattr(args, "window", 0.0)
    with sim_process(*case["sim"], *(["--window-seconds", str(window)] if window else [])) as base:
        if args.drivers == 1:
            bot = _bot(base, namespace, case)
            asyncio.run(bot.execute("warm up"))  # the gateway and the leases, up
            asyncio.run(sim_stats(base, reset=True))
            started = time.perf_counter()
            done, args.dropped = asyncio.run(_run(bot, 0, items, args.concurrency))
            args.elapsed = time.perf_counter() - started
        else:
            done = _drivers(args, base, namespace, items)
        stats = asyncio.run(sim_stats(base))
    limited = sum(n for cause, n in stats["rate_limited"].items() if cause != "concurrency")
    if args.case == "tpm":
        held = stats["admitted_tokens"] / args.elapsed / TOKENS_PER_SECOND
    else:
        held = stats["admitted_requests"] / args.elapsed / RPS
    return {
        "case": args.case,
        "drivers": args.drivers,
        "items": items,
        "done": done,
        "requests": stats["requests"],
        "429s": limited,
        "429_share": round(limited / max(1, stats["requests"]), 4),
        "held_of_limit": round(held, 3),
        "seconds": round(args.elapsed, 2),
        "dropped_late": args.dropped,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", choices=sorted(CASES), default=None)
    parser.add_argument("--drivers", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--items", type=int, default=None)
    parser.add_argument("--driver", action="store_true")  # internal: one driver process
    parser.add_argument("--address")
    parser.add_argument("--namespace")
    parser.add_argument("--base")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--window", type=float, default=1.0, help="the simulator's window (s)")
    args = parser.parse_args()
    if args.driver:
        driver(args)
        return
    ray.init(address="local", namespace="bench-rates", log_to_driver=False)
    try:
        for name in [args.case] if args.case else sorted(CASES):
            args.case = name
            print(json.dumps(bench(args)), flush=True)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()

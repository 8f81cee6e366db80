"""A driver process of its own for the lease tests (run as a script, not collected).

It joins the test session's Ray at `--address`, runs `--runs` agent runs at once against
the simulator at `--base-url` (the endpoint the tests' `sim_model` uses), prints
`READY` once its runs are started, then `RESULT {json}` with each run's status, and
exits: what it made (a gateway) must outlive it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os

import ray

import raygent
from raygent.actors import RayOptions, ray_backend

KEY = "sk-ray-test-000000"  # ray_support.KEY: the same endpoint as the tests' models


async def drive(args: argparse.Namespace) -> list[str]:
    rate = raygent.RateLimit(requests_per_minute=args.rpm) if args.rpm else None
    model = raygent.OpenAIModel(
        "sim-gpt", base_url=args.base_url, api_key=KEY, max_concurrency=args.bound, rate_limit=rate
    )
    options = RayOptions(namespace=args.namespace, lease_ttl=args.lease_ttl)
    bot = raygent.agent(model=model, backend=ray_backend(options))
    runs = [asyncio.ensure_future(bot.execute(f"{args.prompt} {i}")) for i in range(args.runs)]
    await asyncio.sleep(0)
    print("READY", flush=True)
    results = await asyncio.gather(*runs)
    return [r.report.status if r.ok else f"{r.report.status}: {r.error}" for r in results]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--bound", type=int, required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--lease-ttl", type=float, default=10.0)
    parser.add_argument("--prompt", default="question")
    parser.add_argument("--rpm", type=float, default=None)  # the model's rate_limit
    args = parser.parse_args()
    ray.init(address=args.address, namespace=args.namespace, log_to_driver=False)
    statuses = asyncio.run(drive(args))
    print("RESULT " + json.dumps({"pid": os.getpid(), "statuses": statuses}), flush=True)


if __name__ == "__main__":
    main()

"""A driver of its own for the tenant tests and benchmark: joins a running Ray, looks a
tenant up by name (registered by another driver) and runs `--items` items of it as a
batch against the simulator; prints `RESULT {json}`."""

from __future__ import annotations

import argparse
import asyncio
import json

import ray

import raygent
from raygent import OpenAIModel
from raygent.actors import RayOptions, ray_backend


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--items", type=int, default=0)
    parser.add_argument("--bound", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=48)
    args = parser.parse_args()
    ray.init(address=args.address, namespace=args.namespace, log_to_driver=False)
    backend = ray_backend(RayOptions(namespace=args.namespace, address=args.address))
    raygent.seams.registry.use_backend(backend)
    found = backend.tenants.get(args.tenant)
    out: dict[str, object] = {"tenant": None if found is None else found.name}
    if found is not None:
        out["weight"] = found.weight
    if found is not None and args.items:
        model = OpenAIModel(
            "sim-gpt", base_url=args.base_url, api_key="sk-tenants", max_concurrency=args.bound
        )
        agent = raygent.agent(model=model, backend=backend)
        items = [{"input": f"{args.tenant} {i}", "tenant": args.tenant} for i in range(args.items)]
        result = await raygent.batch(
            agent, items, concurrency=args.concurrency, runners=1, progress=False
        )
        out["succeeded"] = result.report.succeeded
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(main())

"""Tenants sharing an endpoint (issue #45, point 4): two tenants of weights 1 and 3 on one
endpoint of bound 16, the simulator replying after `--latency-ms`.

1. Local, one process: each tenant has `--callers` callers running one run after
   another. While both are busy (up to the moment the first one is done), the heavy
   tenant's completions against the light one's: target 3 (1:3 ± 10%). Then the light
   tenant alone against the same callers with no tenant (the whole bound), rounds
   alternating: target 1 (it gets all of it), and its peak in flight the bound.
2. Ray, three drivers (processes of their own joining one Ray): the light tenant in
   one, the heavy tenant in two, both registered by name in the gateway; the same
   ratio while all three are busy.

    python benchmarks/bench_tenants.py [--latency-ms 100] [--runs 600] [--no-ray | --no-local]

Figures (2 cores shared with other work): two tenants of weights 1 and 3 on one endpoint
of bound 16, replies after 100 ms, each tenant 32 callers running one run after another
(the heavy one 3x the runs). Locally, while both are busy (until the first is done):
light 600, heavy 1,753 runs, heavy/light 2.92 (target 3 ± 0.3; the same in three runs),
peak in flight 16; the light tenant alone against the same callers with no tenant: 147
against 148 runs/s (0.99; 1.00 in another run; the bound's ceiling 160), peak 16. On
Ray, three drivers (light in one, heavy in two, both registered by name in the gateway),
from each driver's first reply until the first was done: light 594, heavy 1,788 (888 +
900), heavy/light 3.01, peak in flight 16; in three more runs 2.97, 2.93 and 3.02.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

BOUND = 16


def _model(base_url: str) -> object:
    from raygent import OpenAIModel

    return OpenAIModel("sim-gpt", base_url=base_url, api_key="sk-bench", max_concurrency=BOUND)


async def _callers(agent: object, tenant: object, runs: int, callers: int) -> list[float]:
    """When each of `runs` runs of `tenant` (None: no tenant) ended (time.time())."""
    left, ends = list(range(runs)), []

    async def caller() -> None:
        while left:
            left.pop()
            result = await agent.execute("question", tenant=tenant)  # type: ignore[attr-defined]
            assert result.ok, result.error
            ends.append(time.time())

    await asyncio.gather(*(caller() for _ in range(callers)))
    return ends


def _share(ends: dict[str, list[float]], start: float | None) -> tuple[dict[str, int], float]:
    """Completions per tenant while all were busy: from `start` (None: once each had
    its first run answered) until the first one was done."""
    start = start or max(min(e) for e in ends.values())
    until = min(max(e) for e in ends.values())
    counts = {name: sum(start <= t <= until for t in e) for name, e in ends.items()}
    return counts, until - start


async def local(args: argparse.Namespace) -> None:
    import raygent
    from raygent import Tenant
    from raygent.seams.local import LOCAL
    from raygent.sim import Latency, Reply, Rule, serve

    light, heavy = Tenant("light", weight=1), Tenant("heavy", weight=3)
    latency = Latency(fixed_ms=args.latency_ms)
    with serve([Rule(reply=Reply(text="ok"))], latency=latency) as sim:
        agent = raygent.agent(model=_model(sim.openai_base_url), backend=LOCAL)
        start = time.time()
        ends = await asyncio.gather(
            _callers(agent, light, args.runs, args.callers),
            _callers(agent, heavy, 3 * args.runs, args.callers),
        )
        counts, busy = _share({"light": ends[0], "heavy": ends[1]}, start)
        peak = sim.stats().peak_in_flight
    ratio = counts["heavy"] / counts["light"]
    print(f"local: while both busy ({busy:.2f}s) light {counts['light']}, heavy {counts['heavy']}")
    print(
        f"  heavy/light = {ratio:.3f} (target 3 ± 0.3)  {'OK' if abs(ratio - 3) <= 0.3 else 'MISS'}"
    )
    print(f"  peak in flight {peak} (bound {BOUND})")
    # Alone: the light tenant's throughput against the same callers with no tenant at all
    # (the whole bound), rounds alternating.
    alone, plain = [], []
    for _ in range(args.rounds):
        for tenant, out in ((light, alone), (None, plain)):
            with serve([Rule(reply=Reply(text="ok"))], latency=latency) as sim:
                agent = raygent.agent(model=_model(sim.openai_base_url), backend=LOCAL)
                start = time.time()
                ends_alone = await _callers(agent, tenant, args.runs, args.callers)
                out.append(
                    (len(ends_alone) / (max(ends_alone) - start), sim.stats().peak_in_flight)
                )
    a_rate, p_rate = statistics.median(r for r, _ in alone), statistics.median(r for r, _ in plain)
    print(
        f"  light alone {a_rate:.0f} runs/s, peak {max(p for _, p in alone)}; no tenant"
        f" {p_rate:.0f} runs/s, peak {max(p for _, p in plain)}: alone/no tenant ="
        f" {a_rate / p_rate:.3f} (target ~1: all of it; the bound's own ceiling"
        f" {BOUND * 1000 / args.latency_ms:.0f} runs/s)"
    )


def driver(args: argparse.Namespace) -> None:
    """One Ray driver: its tenant by name, `--callers` callers, ends printed as JSON."""
    import ray

    import raygent
    from raygent.actors import RayOptions, ray_backend

    ray.init(address=args.address, namespace=args.namespace, log_to_driver=False)
    backend = ray_backend(RayOptions(namespace=args.namespace, address=args.address))
    agent = raygent.agent(model=_model(args.base_url), backend=backend)
    tenant = backend.tenants.get(args.tenant)
    assert tenant is not None, args.tenant

    async def main() -> list[float]:
        await agent.execute("warm up", tenant=tenant)  # the lease, before the clock
        print("READY", flush=True)
        sys.stdin.readline()  # all three start together
        return await _callers(agent, tenant, args.runs, args.callers)

    print("RESULT " + json.dumps(asyncio.run(main())), flush=True)


def on_ray(args: argparse.Namespace) -> None:
    import ray

    import raygent
    import raygent.seams.registry
    from raygent import Tenant
    from raygent.actors import RayOptions, ray_backend
    from raygent.sim import Latency, Reply, Rule, serve

    namespace = f"bench-tenants-{os.getpid()}"
    ray.init(namespace=namespace, include_dashboard=False, log_to_driver=False)
    raygent.seams.registry.use_backend(ray_backend(RayOptions(namespace=namespace)))
    raygent.register_tenant(Tenant("light", weight=1), Tenant("heavy", weight=3))
    with serve([Rule(reply=Reply(text="ok"))], latency=Latency(fixed_ms=args.latency_ms)) as sim:
        common = [
            *("--address", ray.get_runtime_context().gcs_address, "--namespace", namespace),
            *("--base-url", sim.openai_base_url, "--callers", str(args.callers)),
        ]
        plan = [("light", args.runs), ("heavy", 3 * args.runs // 2), ("heavy", 3 * args.runs // 2)]
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--driver",
                    "--tenant",
                    name,
                    "--runs",
                    str(runs),
                    *common,
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for name, runs in plan
        ]
        for proc in procs:
            assert proc.stdout is not None
            while not proc.stdout.readline().startswith("READY"):
                pass
        start = time.time()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        ends: dict[str, list[float]] = {}
        for i, (proc, (name, _)) in enumerate(zip(procs, plan, strict=True)):
            out, _ = proc.communicate(timeout=600)
            line = [x for x in out.splitlines() if x.startswith("RESULT ")][-1]
            ends[f"{name}-{i}"] = json.loads(line.removeprefix("RESULT "))
        peak = sim.stats().peak_in_flight
    counts, busy = _share(ends, None)
    for name, e in ends.items():
        print(f"  {name}: {len(e)} runs, {min(e) - start:.2f}s to {max(e) - start:.2f}s")
    light = counts["light-0"]
    heavy = counts["heavy-1"] + counts["heavy-2"]
    ratio = heavy / light
    print(
        f"ray, 3 drivers: while all busy ({busy:.2f}s, from each one's first reply)"
        f" light {light}, heavy {heavy} {counts}"
    )
    print(
        f"  heavy/light = {ratio:.3f} (target 3 ± 0.3)  {'OK' if abs(ratio - 3) <= 0.3 else 'MISS'}"
    )
    print(f"  peak in flight {peak} (bound {BOUND})")
    ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-ms", type=int, default=100)
    parser.add_argument("--runs", type=int, default=600)
    parser.add_argument("--callers", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--no-local", action="store_true")
    parser.add_argument("--driver", action="store_true")
    parser.add_argument("--tenant")
    parser.add_argument("--address")
    parser.add_argument("--namespace")
    parser.add_argument("--base-url")
    args = parser.parse_args()
    if args.driver:
        driver(args)
        return
    os.environ.setdefault("RAYGENT_OFFLINE", "1")
    print("python benchmarks/bench_tenants.py " + " ".join(sys.argv[1:]))
    if not args.no_local:
        asyncio.run(local(args))
    if not args.no_ray:
        on_ray(args)


if __name__ == "__main__":
    main()

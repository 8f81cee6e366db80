"""What one agent run costs on the Ray backend, as a ratio to the local backend.

The simulator runs in its own process with zero latency, so what is measured is
raygent's own cost. Ray adds one gateway actor call per model trip and one tool-executor
call per trip that calls tools (or, for a tool that asks for a CPU, one task per call:
measured too). Each case runs `--runs` times, sequentially, interleaved
over `--rounds`; the median round is reported. Per run: wall time, the driver's CPU,
and the CPU of the driver plus every Ray process (raylet, GCS, gateway actor, tool
executors: all the driver's descendants but the simulator), read from /proc (Linux).
Then width: `--wide` runs at once, each calling a tool that waits 20 ms, on the tool
executors and as one task per call asking for a CPU.

    python benchmarks/bench_ray_overhead.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import ray
from _sim_process import sim_process

import raygent
from raygent import OpenAIModel
from raygent.actors import RayOptions, ray_backend
from raygent.seams.contract import Backend
from raygent.seams.local import LOCAL

Case = Callable[[], Awaitable[object]]
_TICK = os.sysconf("SC_CLK_TCK")


def _lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


lookup = raygent.tool(name="lookup")(_lookup)
# The same tool asking for a CPU: on Ray it needs placement, so each call is a task (what
# every tool call was before the tool executors).
lookup_on_a_task = raygent.tool(name="lookup", num_cpus=1)(_lookup)


async def _lookup_waits(key: str) -> str:
    """Look a key up, over the network (20 ms)."""
    await asyncio.sleep(0.02)
    return f"value of {key}"


waits = raygent.tool(name="lookup")(_lookup_waits)
waits_on_a_task = raygent.tool(name="lookup", num_cpus=1)(_lookup_waits)


def _tree_cpu(root: int, skip: set[int]) -> float:
    """CPU seconds (user + system) of `root` and its descendants, except `skip`s."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended meanwhile
        pid = int(entry)
        parents[pid] = int(fields[1])
        cpu[pid] = (int(fields[11]) + int(fields[12])) / _TICK
    total = 0.0
    for pid, seconds in cpu.items():
        walk = pid
        while walk not in (root, 0, 1) and walk in parents and walk not in skip:
            walk = parents[walk]
        if walk == root and pid not in skip:
            total += seconds
    return total


async def measure(case: Case, runs: int, skip: set[int]) -> tuple[float, float, float]:
    """Wall, driver CPU and whole-tree CPU per run, in milliseconds."""
    me = os.getpid()
    tree, cpu, wall = _tree_cpu(me, skip), time.process_time(), time.perf_counter()
    for _ in range(runs):
        await case()
    per = 1000 / runs
    return (
        (time.perf_counter() - wall) * per,
        (time.process_time() - cpu) * per,
        (_tree_cpu(me, skip) - tree) * per,
    )


def _sim_pids() -> set[int]:
    me, found = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if b"raygent\x00sim" in cmdline and int(entry) != me:
                found.add(int(entry))
    return found


async def run(args: argparse.Namespace, base: str) -> None:
    model = OpenAIModel("sim-gpt", base_url=base + "/v1", api_key="sk-bench")
    backends = {"local": LOCAL, "ray": ray_backend(RayOptions())}
    cases: dict[str, Case] = {}
    for name, backend in backends.items():
        plain = raygent.agent(model=model, system_prompt="Be brief.", backend=backend)
        with_tool = raygent.agent(model=model, tools=[lookup], backend=backend)

        async def one_trip(agent: raygent.Agent = plain) -> object:
            result = await agent.execute("plain question")
            assert result.ok, result.error
            return result

        async def tool_trip(agent: raygent.Agent = with_tool) -> object:
            result = await agent.execute("use the tool please")
            assert result.ok and len(result.report.trips) == 2, result.error
            return result

        cases[f"{name}: one trip, no tools"] = one_trip
        cases[f"{name}: tool call + answer"] = tool_trip
    on_a_task = raygent.agent(model=model, tools=[lookup_on_a_task], backend=backends["ray"])

    async def task_trip(agent: raygent.Agent = on_a_task) -> object:
        result = await agent.execute("use the tool please")
        assert result.ok and len(result.report.trips) == 2, result.error
        return result

    cases["ray: tool call (a task) + answer"] = task_trip
    skip = _sim_pids()
    for case in cases.values():
        await measure(case, 20, skip)  # warm up: the gateway and the tool executors start
    rounds: dict[str, list[tuple[float, float, float]]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, case in cases.items():
            rounds[name].append(await measure(case, args.runs, skip))
    median = {
        name: tuple(statistics.median(r[i] for r in values) for i in range(3))
        for name, values in rounds.items()
    }
    print(f"\nPer run, median of {args.rounds} rounds of {args.runs} sequential runs (ms)\n")
    print(f"{'case':34} {'wall':>8} {'driver CPU':>11} {'all CPU':>9}")
    for name, (wall, cpu, tree) in median.items():
        print(f"{name:34} {wall:8.2f} {cpu:11.2f} {tree:9.2f}")
    print(f"\n{'ray / local':34} {'wall':>8} {'driver CPU':>11} {'all CPU':>9}")
    shapes = {
        "one trip, no tools": "one trip, no tools",
        "tool call + answer": "tool call + answer",
        "tool call (a task) + answer": "tool call + answer",
    }
    for shape, local_shape in shapes.items():
        ray_m, local_m = median[f"ray: {shape}"], median[f"local: {local_shape}"]
        ratios = [r / max(lo, 1e-9) for r, lo in zip(ray_m, local_m, strict=True)]
        print(f"{shape:34} {ratios[0]:8.2f} {ratios[1]:11.2f} {ratios[2]:9.2f}")
    await width(args, model, backends["ray"])
    print("\nreproduce: python benchmarks/bench_ray_overhead.py " + " ".join(sys.argv[1:]))


async def width(args: argparse.Namespace, model: OpenAIModel, backend: Backend) -> None:
    """`--wide` runs at once, each calling a tool that waits 20 ms: on the executors, and
    as one task per call asking for a CPU (this Ray has 2)."""
    agents = {
        "executors": raygent.agent(model=model, tools=[waits], backend=backend),
        "a task per call (1 CPU)": raygent.agent(
            model=model, tools=[waits_on_a_task], backend=backend
        ),
    }

    async def batch(agent: raygent.Agent) -> float:
        clock = time.perf_counter()
        results = await asyncio.gather(*(agent.execute("use the tool") for _ in range(args.wide)))
        assert all(r.ok for r in results)
        return time.perf_counter() - clock

    seconds: dict[str, list[float]] = {name: [] for name in agents}
    for agent in agents.values():
        await batch(agent)  # warm up
    for _ in range(args.rounds):
        for name, agent in agents.items():
            seconds[name].append(await batch(agent))
    print(f"\n{args.wide} runs at once, a tool that waits 20 ms (median of {args.rounds})")
    for name, values in seconds.items():
        wall = statistics.median(values)
        print(f"{name:34} {wall * 1000:8.0f} ms   {args.wide / wall:7.0f} runs/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--wide", type=int, default=64)
    args = parser.parse_args()
    script = str(Path(__file__).with_name("agent_overhead_script.yaml"))
    # A local Ray of its own (ray.init picks free ports: never Redis's 6379).
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with sim_process("--script", script) as base:
            asyncio.run(run(args, base))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()

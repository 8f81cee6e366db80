"""What a workflow or supervisor costs over running its agents by hand.

CPU per item (`time.process_time`, this process: the simulator runs in its own at zero
latency), the flow against the same agent runs written by hand in the same process,
cases interleaved over `--rounds`, the median round reported:

1. a three-step workflow (agent -> agent -> agent, each given the last one's text)
   against three `execute` calls in a row;
2. a workflow whose one step runs four agents in parallel against `asyncio.gather` of
   the four runs;
3. a supervisor routing to one intent, then END (a route function: no router agent)
   against that agent's run alone.

What the flow adds is its own report, events and step bookkeeping; the runs inside it
are the same runs. Target: <= 1.1x in each case.

    python benchmarks/bench_flows.py
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

from _sim_process import sim_process

import raygent
from raygent import OpenAIModel

Case = Callable[[], Awaitable[object]]


def cases(model: OpenAIModel) -> dict[str, tuple[Case, Case]]:
    """name -> (by hand, the flow)."""
    local = raygent.seams.LOCAL
    a, b, c, d = (
        raygent.agent(name=n, model=model, system_prompt=f"You are {n}.", backend=local)
        for n in ("a", "b", "c", "d")
    )

    async def chain_by_hand() -> object:
        text = "Write about tides."
        for agent in (a, b, c):
            result = await agent.execute(text)
            assert result.ok, result.error
            text = result.text
        return text

    chain = raygent.workflow(
        name="chain",
        steps=[raygent.step("a", agent=a), raygent.step("b", agent=b), raygent.step("c", agent=c)],
    )

    async def chain_flow() -> object:
        result = await chain.execute("Write about tides.")
        assert result.ok, result.error
        return result

    async def fan_by_hand() -> object:
        results = await asyncio.gather(*(x.execute("Write about tides.") for x in (a, b, c, d)))
        assert all(r.ok for r in results)
        return results

    fan = raygent.workflow(
        name="fan", steps=[raygent.step("fan", parallel={"a": a, "b": b, "c": c, "d": d})]
    )

    async def fan_flow() -> object:
        result = await fan.execute("Write about tides.")
        assert result.ok, result.error
        return result

    async def alone() -> object:
        result = await a.execute("Write about tides.")
        assert result.ok, result.error
        return result

    desk = raygent.supervisor(
        name="desk",
        intents={"a": a, "b": b},
        route=lambda state: "a" if not state.history else raygent.END,
    )

    async def routed() -> object:
        result = await desk.execute("Write about tides.")
        assert result.ok, result.error
        return result

    return {
        "workflow, 3 agent steps": (chain_by_hand, chain_flow),
        "workflow, 4 parallel branches": (fan_by_hand, fan_flow),
        "supervisor, 1 intent": (alone, routed),
    }


async def cpu_per_item(case: Case, runs: int) -> float:
    start = time.process_time()
    for _ in range(runs):
        await case()
    return (time.process_time() - start) * 1e6 / runs


async def paired(by_hand: Case, flow: Case, runs: int) -> tuple[float, float]:
    """CPU per item of each, alternating item by item (a drift in the machine's speed
    falls on both alike)."""
    hand_cpu = flow_cpu = 0.0
    for _ in range(runs):
        start = time.process_time()
        await by_hand()
        middle = time.process_time()
        await flow()
        hand_cpu += middle - start
        flow_cpu += time.process_time() - middle
    return hand_cpu * 1e6 / runs, flow_cpu * 1e6 / runs


async def run(args: argparse.Namespace, base: str) -> None:
    model = OpenAIModel("sim-gpt", base_url=base + "/v1", api_key="sk-bench")
    table = cases(model)
    for by_hand, flow in table.values():
        await cpu_per_item(by_hand, 10)  # warm up: connections, schemas, caches
        await cpu_per_item(flow, 10)
    rounds: dict[str, list[tuple[float, float]]] = {name: [] for name in table}
    for _ in range(args.rounds):
        for name, (by_hand, flow) in table.items():
            rounds[name].append(await paired(by_hand, flow, args.runs))
    print(
        f"\nCPU per item, median of {args.rounds} rounds of {args.runs} sequential items "
        "(the flow and by hand alternate item by item; the ratio is each round's)\n"
    )
    print(f"{'case':32} {'by hand us':>11} {'flow us':>9} {'x by hand':>10}   rounds")
    for name, pairs in rounds.items():
        ratios = sorted(flow / hand for hand, flow in pairs)
        hand = statistics.median(h for h, _ in pairs)
        flow = statistics.median(f for _, f in pairs)
        spread = " ".join(f"{r:.2f}" for r in ratios)
        print(f"{name:32} {hand:11.0f} {flow:9.0f} {statistics.median(ratios):10.2f}   {spread}")
    print("(target <= 1.1x each)")
    print("\nreproduce: python benchmarks/bench_flows.py " + " ".join(sys.argv[1:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with sim_process() as base:
        asyncio.run(run(args, base))


if __name__ == "__main__":
    main()

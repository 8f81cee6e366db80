"""CPU cost of one agent run, as a ratio to a bare adapter call in the same process.

The simulator runs in its own process with zero latency, so the client process's CPU
time is what raygent costs: building requests, parsing replies, the loop, events,
reports. Each case runs `--runs` times, sequentially, interleaved over `--rounds`; the
median round is reported. `--observer` adds the tool run with an OpenTelemetry observer
attached (the SDK's span pipeline to an exporter that keeps nothing, and, where the
observer takes one, a meter provider read in memory): what telemetry adds to a run.

    python benchmarks/bench_agent_overhead.py [--observer]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from _sim_process import sim_process

import raygent
from raygent import OpenAIModel, UserMessage

Case = Callable[[], Awaitable[object]]


def observer() -> tuple[str, raygent.observers.Observer]:
    """An OpenTelemetry observer on the real SDK; spans and metrics when it takes a meter
    provider, else spans (the observer before metrics were added)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult as Result

    class Discard(SpanExporter):
        def export(self, spans: object) -> Result:
            return Result.SUCCESS

    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(Discard()))
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    try:
        otel = raygent.observers.OpenTelemetry(tracing, meter_provider=meters)
    except TypeError:
        return "spans", raygent.observers.OpenTelemetry(tracing)
    return "spans+metrics", otel


@raygent.tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


async def cpu_per_call(case: Case, runs: int) -> float:
    start = time.process_time()
    for _ in range(runs):
        await case()
    return (time.process_time() - start) * 1e6 / runs


async def run(args: argparse.Namespace, base: str) -> None:
    model = OpenAIModel("sim-gpt", base_url=base + "/v1", api_key="sk-bench")
    messages = [UserMessage(content="plain question")]
    plain = raygent.agent(model=model, system_prompt="Be brief.")
    with_tool = raygent.agent(model=model, tools=[lookup], system_prompt="Be brief.")
    listened = raygent.agent(model=model, on={"*": lambda event: None})

    async def run_with_tool() -> object:
        result = await with_tool.execute("use the tool please")
        assert result.ok and len(result.report.trips) == 2, result.error
        return result

    async def streamed() -> object:
        stream = plain.stream("plain question")
        async for _ in stream:
            pass
        return await stream.result

    extra: dict[str, tuple[Case, int]] = {}
    if args.observer:
        kind, otel = observer()
        observed = raygent.agent(model=model, tools=[lookup], system_prompt="Be brief.")

        async def run_observed() -> object:
            result = await observed.execute("use the tool please", observe=otel)
            assert result.ok and len(result.report.trips) == 2, result.error
            return result

        extra[f"run: 2 trips, OpenTelemetry ({kind})"] = (run_observed, 2)
    cases: dict[str, tuple[Case, int]] = {
        "bare adapter call (baseline)": (lambda: model.complete(messages), 1),
        "run: one trip, no tools": (lambda: plain.execute("plain question"), 1),
        "run: one trip, every event handled": (lambda: listened.execute("plain question"), 1),
        "run: one trip, streamed": (streamed, 1),
        "run: tool call + answer (2 trips)": (run_with_tool, 2),
        **extra,
    }
    for case, _ in cases.values():
        await cpu_per_call(case, 20)  # warm up
    rounds: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, (case, _) in cases.items():
            rounds[name].append(await cpu_per_call(case, args.runs))
    median = {name: statistics.median(values) for name, values in rounds.items()}
    base_cpu = median["bare adapter call (baseline)"]
    print(f"\nCPU per call, median of {args.rounds} rounds of {args.runs} sequential calls\n")
    print(f"{'case':46} {'CPU us':>9} {'x bare call':>12} {'x per trip':>11}")
    for name, (_, trips) in cases.items():
        ratio = median[name] / base_cpu
        print(f"{name:46} {median[name]:9.0f} {ratio:12.2f} {ratio / trips:11.2f}")
    print("\nreproduce: python benchmarks/bench_agent_overhead.py " + " ".join(sys.argv[1:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--observer", action="store_true", help="add a run observed by OTel")
    args = parser.parse_args()
    # The agent loop's own cost, in this process (Ray's is bench_ray_overhead.py's).
    raygent.init("local")
    script = str(Path(__file__).with_name("agent_overhead_script.yaml"))
    with sim_process("--script", script) as base:
        asyncio.run(run(args, base))


if __name__ == "__main__":
    main()

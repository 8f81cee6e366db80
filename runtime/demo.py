"""`raygent demo`: raygent's main job, on the embedded default, against the simulator.

An agent with a tool and structured output answers a bundled dataset of 500 travellers'
questions in bulk (`raygent.batch`), each traveller's questions in their own stored
conversation (SQLite sessions), with a progress bar; the results are written as they
end, and a summary closes. On the Ray backend (the default) it runs on a local Ray:
batch runners, model gateways, tool executors and session hosts.

The model is the built-in provider simulator (a local HTTP server speaking the OpenAI
and Anthropic wire formats), so the demo needs no key and no network. The same agent
talks to a real provider when given a real model.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from raygent.stores import SQLiteStore

from ._batch.call import BatchItem, BatchResult, batch
from .agents import Agent, agent
from .memory import Memory
from .models import AnthropicModel, GeminiModel, OpenAIModel
from .pricing import Pricing
from .seams.registry import current_backend, init
from .sim import Latency, Match, Reply, Rule, ToolCallReply, serve
from .tools import tool
from .usage import total_cost

__all__ = ["Forecast", "dataset", "run_demo"]

DATASET = "demo_questions.jsonl"
BOUND = 32  # the provider's concurrency bound, as declared on the model


class Forecast(BaseModel):
    """What the agent must answer with."""

    city: str
    temp_c: float
    summary: str


@tool
def get_weather(city: str) -> dict[str, object]:
    """Current weather for a city.

    Args:
        city: the city's name.
    """
    return {"city": city, "temp_c": _temp(city), "sky": "clear"}


def _temp(city: str) -> float:
    return float(4 + sum(map(ord, city)) % 25)


def dataset(limit: int | None = None) -> list[dict[str, Any]]:
    """The bundled questions: `{"id", "input", "city", "session_id"}` rows (the first
    `limit`)."""
    text = resources.files(__package__ or "raygent").joinpath(DATASET).read_text("utf-8")
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return rows if limit is None else rows[:limit]


def _script(cities: set[str]) -> list[Rule]:
    rules = []
    for city in sorted(cities):
        rules += [
            Rule(
                match=Match(last_user=rf"\b{city}\b", after_tool_result=False),
                reply=Reply(tool_calls=[ToolCallReply("get_weather", {"city": city})]),
            ),
            Rule(
                match=Match(last_user=rf"\b{city}\b", after_tool_result=True),
                reply=Reply(
                    json={"city": city, "temp_c": _temp(city), "summary": f"Clear in {city}."}
                ),
            ),
        ]
    return rules


# Declared pricing: the simulator's models are in no price list. A real model such as
# "gpt-4o-mini" is priced from genai-prices without this.
DEMO_PRICING = Pricing(input_per_mtok=0.15, output_per_mtok=0.60)


async def run_demo(
    latency_ms: float = 50.0,
    items: int | None = None,
    out: str | Path | None = None,
    concurrency: int = 64,
    provider: str = "openai",
) -> BatchResult:
    """Run the demo against an in-process simulator; return the batch's result. It writes
    under `out` (a new temporary folder by default), and says where. `provider`: the
    wire the bulk run speaks, "openai" or "gemini"."""
    print("raygent demo: the model here is the built-in provider SIMULATOR, not a real LLM.")
    folder = (
        _fresh(Path(out)) if out is not None else Path(tempfile.mkdtemp(prefix="raygent-demo-"))
    )
    print(f"  writing to {folder} (results.jsonl, sessions.db); --out DIR names the folder")
    _start_backend()
    rows = dataset(items)
    cities = {"Paris", "Rome", *(row["city"] for row in rows)}
    latency = Latency(fixed_ms=latency_ms, per_token_ms=1, jitter_ms=latency_ms / 5)
    sink = folder / "results.jsonl"
    async with serve(_script(cities), latency=latency) as sim:
        print(f"  simulator at {sim.url} (OpenAI, Anthropic and Gemini wire formats)\n")
        forecaster = _forecaster(sim, provider, folder / "sessions.db")
        # The bulk run's runners start while the first run streams (as a long-lived
        # driver's are up already): the bulk run's time is the batch's, not a start-up's.
        starting = asyncio.ensure_future(_start_runners(forecaster, concurrency))
        await _one_run_streamed(forecaster)
        await starting
        result, elapsed = await _in_bulk(forecaster, rows, concurrency, sink)
        sample = await forecaster.session(rows[0]["session_id"]).history()
        await _on_the_anthropic_wire(sim.anthropic_base_url)
        await _on_the_gemini_wire(sim.gemini_base_url)
        peak = sim.stats().peak_in_flight

    _summary(result, elapsed, peak)
    _where_it_went(sink, folder / "sessions.db", rows[0]["session_id"], len(sample))
    return result


def _start_backend() -> None:
    backend = current_backend()
    if backend.name == "ray":
        backend = init("ray", include_dashboard=False, log_to_driver=False)
        where = "a local Ray (batch runners, model gateways, tool executors, session hosts)"
    else:
        where = "this process"
    print(f"  backend: {backend.name}: {where}; RAYGENT_BACKEND=local runs it in-process")


async def _start_runners(forecaster: Agent, concurrency: int) -> None:
    batches = (forecaster.backend or current_backend()).batches
    if batches is not None:  # the local backend runs the batch here: nothing to start
        await batches.start(concurrency)


async def _one_run_streamed(forecaster: Agent) -> None:
    print("One run, streamed as events:")
    stream = forecaster.stream("What's the weather in Paris?")
    kinds = [event.type async for event in stream]
    print("  " + "\n  ".join(_collapsed(kinds)))
    first = await stream.result
    print(f"  -> {first.data!r}\n")


async def _in_bulk(
    forecaster: Agent, rows: list[dict[str, Any]], concurrency: int, sink: Path
) -> tuple[BatchResult, float]:
    """The batch of every question; its result and how long it took."""
    print(
        f"{len(rows)} questions from {len({r['session_id'] for r in rows})} travellers, "
        f"{concurrency} runs at a time, their requests held to the provider's bound of "
        f"{BOUND} in flight, each traveller in their own stored conversation:"
    )
    started = time.perf_counter()
    result = await batch(
        forecaster,
        rows,
        concurrency=concurrency,
        sink=sink,
        mode="overwrite",  # each demo starts afresh (its sessions too, see `_fresh`)
        progress=None,
        on_item=_milestones(len(rows)),
    )
    return result, time.perf_counter() - started


async def _on_the_anthropic_wire(base_url: str) -> None:
    claude = AnthropicModel(
        "sim-claude", base_url=base_url, api_key="sk-demo", pricing=DEMO_PRICING
    )
    same = agent("forecaster-claude", model=claude, tools=[get_weather], output=Forecast)
    other = await same.execute("And the weather in Rome?")
    print(f"\nThe same agent on the Anthropic wire: {other.status} {other.data!r}")


async def _on_the_gemini_wire(base_url: str) -> None:
    gemini = GeminiModel("sim-gemini", base_url=base_url, api_key="demo", pricing=DEMO_PRICING)
    same = agent("forecaster-gemini", model=gemini, tools=[get_weather], output=Forecast)
    other = await same.execute("And the weather in Rome?")
    print(f"The same agent on the Gemini wire: {other.status} {other.data!r}")


def _where_it_went(sink: Path, sessions: Path, session_id: str, stored: int) -> None:
    print(f"  results: {sink} (one JSON line per question, written as each ended)")
    print(f"  sessions: {sessions} ({session_id} holds {stored} messages)")
    print(
        "\nTo use a real provider: OpenAIModel('gpt-4o-mini') reads OPENAI_API_KEY, "
        "AnthropicModel('claude-sonnet-4-5') reads ANTHROPIC_API_KEY,\n"
        "GeminiModel('gemini-2.5-flash') reads GEMINI_API_KEY (vertex=True: Google's"
        " default credentials);\n"
        "any OpenAI-compatible server works with base_url='http://host:port/v1'."
    )


def _fresh(out: Path) -> Path:
    folder = out.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("sessions.db*"):  # each demo starts its conversations afresh
        stale.unlink()
    return folder


def _forecaster(sim: Any, provider: str, sessions: Path) -> Agent:
    model: OpenAIModel | GeminiModel
    if provider == "gemini":
        model = GeminiModel(
            "sim-gemini",
            base_url=sim.gemini_base_url,
            api_key="demo",
            pricing=DEMO_PRICING,
            max_concurrency=BOUND,
        )
    else:
        model = OpenAIModel(
            "sim-gpt",
            base_url=sim.openai_base_url,
            api_key="sk-demo",
            pricing=DEMO_PRICING,
            max_concurrency=BOUND,
        )
    return agent(
        "forecaster",
        model=model,
        system_prompt="You answer weather questions for {{audience}}.",
        placeholders={"audience": "travellers"},
        tools=[get_weather],
        output=Forecast,
        memory=Memory(SQLiteStore(sessions), save_policy="turn"),
    )


def _milestones(total: int) -> Any:
    """Progress lines where there is no terminal for a bar (a pipe, CI)."""
    if sys.stderr is not None and sys.stderr.isatty():
        return None
    every = max(1, total // 5)
    done = 0

    def on_item(item: BatchItem) -> None:
        nonlocal done
        done += 1
        if done % every == 0 or done == total:
            print(f"  {done}/{total} done", flush=True)

    return on_item


def _collapsed(kinds: list[str]) -> list[str]:
    """Event names with repeats folded: `agent.trip.streaming x4`."""
    out: list[str] = []
    count = 0
    for position, kind in enumerate(kinds):
        count += 1
        if position + 1 == len(kinds) or kinds[position + 1] != kind:
            out.append(kind if count == 1 else f"{kind} x{count}")
            count = 0
    return out


def _summary(result: BatchResult, elapsed: float, peak: int) -> None:
    report = result.report
    usage = result.usage
    cost = total_cost(usage)
    money = "unknown (no pricing for the model)" if cost is None else f"${cost:.6f}"
    p50 = f"{report.latency_p50:.2f}" if report.latency_p50 is not None else "-"
    p95 = f"{report.latency_p95:.2f}" if report.latency_p95 is not None else "-"
    print(
        f"\nsummary: {report.succeeded}/{report.total} completed, {report.failed} failed, "
        f"in {elapsed:.1f} s ({report.total / elapsed:.0f} items/s, latency p50 {p50} s, "
        f"p95 {p95} s)\n"
        f"  {usage.total_input_tokens} in / {usage.output_tokens} out tokens, cost {money}; "
        f"peak {peak} requests in flight (bound {BOUND})"
    )

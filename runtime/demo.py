"""`raygent demo`: an agent with a tool and structured output, against the simulator.

The model here is the built-in provider simulator (a local HTTP server speaking the
OpenAI and Anthropic wire formats), so the demo needs no key and no network. The same
agent talks to a real provider when given a real model.
"""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel

from .agents import agent
from .backend import current_backend
from .models import AnthropicModel, OpenAIModel
from .pricing import Pricing
from .report import AgentResult
from .sim import Latency, Match, Reply, Rule, ToolCallReply, serve
from .tools import tool
from .usage import Usage, total_cost

CITIES = ["Paris", "Lagos", "Lima", "Osaka", "Oslo", "Perth", "Quito", "Rome", "Seoul", "Tunis"]


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
    return {"city": city, "temp_c": 12 + len(city) % 7 * 3, "sky": "clear"}


def _script() -> list[Rule]:
    rules = []
    for city in CITIES:
        rules += [
            Rule(
                match=Match(last_user=city, after_tool_result=False),
                reply=Reply(tool_calls=[ToolCallReply("get_weather", {"city": city})]),
            ),
            Rule(
                match=Match(last_user=city, after_tool_result=True),
                reply=Reply(json={"city": city, "temp_c": 21.0, "summary": f"Clear in {city}."}),
            ),
        ]
    return rules


# Declared pricing: the simulator's models are in no price list. A real model such as
# "gpt-4o-mini" is priced from genai-prices without this.
DEMO_PRICING = Pricing(input_per_mtok=0.15, output_per_mtok=0.60)


async def run_demo(latency_ms: float = 50.0) -> list[AgentResult]:
    """Run the demo against an in-process simulator; return the results."""
    print("raygent demo: the model here is the built-in provider SIMULATOR, not a real LLM.")
    backend = current_backend()
    print(f"  backend: {backend.name} (RAYGENT_BACKEND=local runs everything in this process)")
    latency = Latency(fixed_ms=latency_ms, per_token_ms=1, jitter_ms=latency_ms / 5)
    async with serve(_script(), latency=latency) as sim:
        print(f"  simulator at {sim.url} (OpenAI and Anthropic wire formats)\n")
        openai = OpenAIModel(
            "sim-gpt", base_url=sim.openai_base_url, api_key="sk-demo", pricing=DEMO_PRICING
        )
        forecaster = agent(
            "forecaster",
            model=openai,
            system_prompt="You answer weather questions for {{audience}}.",
            placeholders={"audience": "travellers"},
            tools=[get_weather],
            output=Forecast,
        )

        print("One run, streamed as events:")
        stream = forecaster.stream("What's the weather in Paris?")
        kinds = [event.type async for event in stream]
        print("  " + "\n  ".join(_collapsed(kinds)))
        first = await stream.result
        print(f"  -> {first.data!r}\n")

        started = time.perf_counter()
        questions = [f"What's the weather in {city}?" for city in CITIES]
        results = await asyncio.gather(*(forecaster.execute(q) for q in questions))
        elapsed = time.perf_counter() - started
        print(f"{len(results)} runs at once in {elapsed:.2f} s:")
        for result in results:
            print(f"  {result.status:9} {result.data!r}")

        claude = AnthropicModel(
            "sim-claude", base_url=sim.anthropic_base_url, api_key="sk-demo", pricing=DEMO_PRICING
        )
        same = agent("forecaster-claude", model=claude, tools=[get_weather], output=Forecast)
        other = await same.execute("And the weather in Rome?")
        print(f"\nThe same agent on the Anthropic wire: {other.status} {other.data!r}")

        _summary([first, *results, other], sim.stats().peak_in_flight)
    print(
        "\nTo use a real provider: OpenAIModel('gpt-4o-mini') reads OPENAI_API_KEY, "
        "AnthropicModel('claude-sonnet-4-5') reads ANTHROPIC_API_KEY;\n"
        "any OpenAI-compatible server works with base_url='http://host:port/v1'."
    )
    return [first, *results, other]


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


def _summary(results: list[AgentResult], peak: int) -> None:
    usage = sum((r.usage for r in results), Usage())
    completed = sum(r.ok for r in results)
    trips = sum(len(r.report.trips) for r in results)
    cost = total_cost(usage)
    money = "unknown (no pricing for one of the models)" if cost is None else f"${cost:.6f}"
    print(
        f"\nsummary: {completed}/{len(results)} completed, {trips} model trips, "
        f"{usage.total_input_tokens} in / {usage.output_tokens} out tokens, cost {money}, "
        f"peak {peak} requests in flight"
    )

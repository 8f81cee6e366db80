"""`raygent demo`: the provider simulator and one call of each adapter, end to end.

Until the agent and batch layers land, the demo shows the foundation they stand on: a
local simulator speaking the OpenAI and Anthropic wire formats, and the adapters
completing, streaming and receiving tool calls from it over real HTTP.
"""

from __future__ import annotations

import asyncio

from .messages import Message, SystemMessage, ToolMessage, UserMessage
from .models import AnthropicModel, ModelOptions, OpenAIModel, TextDelta, ToolSpec
from .pricing import Pricing
from .sim import Latency, Match, Reply, Rule, ToolCallReply, serve
from .usage import Usage, total_cost

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)

SCRIPT = [
    Rule(
        match=Match(last_user="weather", after_tool_result=False),
        reply=Reply(
            text="Let me check.", tool_calls=[ToolCallReply("get_weather", {"city": "Paris"})]
        ),
    ),
    Rule(match=Match(after_tool_result=True), reply=Reply(text="It is 21 °C and sunny in Paris.")),
]

# Declared pricing (the simulator's models are not in any price list); a real model
# such as "gpt-4o-mini" is priced from genai-prices without this.
DEMO_PRICING = Pricing(input_per_mtok=0.15, output_per_mtok=0.60)


def _line(label: str, usage: Usage) -> str:
    cost = total_cost(usage)
    money = "unknown" if cost is None else f"${cost:.8f}"
    return (
        f"  {label}: {usage.total_input_tokens} in / {usage.output_tokens} out tokens, cost {money}"
    )


async def run_demo(latency_ms: float = 50.0) -> Usage:
    """Run the demo against an in-process simulator; return the total usage."""
    print("raygent demo: the model here is the built-in provider SIMULATOR, not a real LLM.")
    async with serve(SCRIPT, latency=Latency(fixed_ms=latency_ms, per_token_ms=2)) as sim:
        print(f"  simulator at {sim.url}: /v1/chat/completions (OpenAI), /v1/messages (Anthropic)")
        openai = OpenAIModel(
            "sim-gpt", base_url=sim.openai_base_url, api_key="sk-demo", pricing=DEMO_PRICING
        )
        claude = AnthropicModel(
            "sim-claude", base_url=sim.anthropic_base_url, api_key="sk-demo", pricing=DEMO_PRICING
        )
        options = ModelOptions(tools=(WEATHER,))
        question: list[Message] = [
            SystemMessage(content="Be brief."),
            UserMessage(content="What's the weather in Paris?"),
        ]

        first = await openai.complete(question, options)
        call = first.tool_calls[0]
        print(f"\nOpenAI adapter, complete: asked for tool {call.name}({call.arguments})")
        result = ToolMessage(
            call_id=call.call_id, name=call.name, content='{"temp_c": 21, "sky": "sunny"}'
        )
        print("OpenAI adapter, stream: ", end="", flush=True)
        async for chunk in openai.stream([*question, first.message, result], options):
            if isinstance(chunk, TextDelta):
                print(chunk.text, end="", flush=True)
            elif chunk.type == "done":
                second = chunk.response
        print()

        third = await claude.complete([*question, first.message, result], options)
        print(f"Anthropic adapter, complete: {third.text}")

        total = first.usage + second.usage + third.usage
        print("\nusage:")
        for label, usage in (
            ("trip 1", first.usage),
            ("trip 2", second.usage),
            ("trip 3", third.usage),
        ):
            print(_line(label, usage))
        print(_line("total", total))
        stats = sim.stats()
        print(f"simulator saw {stats.requests} requests, peak {stats.peak_in_flight} in flight")
    print(
        "\nTo use a real provider: OpenAIModel('gpt-4o-mini') reads OPENAI_API_KEY, "
        "AnthropicModel('claude-sonnet-4-5') reads ANTHROPIC_API_KEY;\n"
        "any OpenAI-compatible server works with base_url='http://host:port/v1'."
    )
    return total


def main() -> None:
    asyncio.run(run_demo())

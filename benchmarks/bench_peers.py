"""raygent against its peers (pydantic-ai, LiteLLM, the OpenAI Agents SDK) on the same job.

The job: `--items` agent runs, each a user question -> the model calls one tool
(`get_weather(city)`) -> the tool's result goes back -> the model answers: two model
trips and one tool call per run, at most `--bound` runs in flight. The model is the
provider simulator in its own process (its CPU is not the client's), speaking the OpenAI
Chat Completions wire at `<url>/v1` with `--latency-ms` to the first byte. Contestants,
each written as its docs show, each against the simulator's OpenAI-compatible base URL
with a dummy key and the same system prompt, question, tool (an async function) and
answer:

1. a hand-written asyncio + aiohttp loop: `--bound` workers posting the two Chat
   Completions bodies and calling the tool themselves (the baseline, 1.00);
2. raygent: `raygent.batch(agent, questions, concurrency=bound)` on the local backend,
   the agent an `OpenAIModel` with the tool;
3. pydantic-ai: an `Agent` on `OpenAIChatModel` + `OpenAIProvider(base_url, api_key)`
   with the tool, `agent.run` gathered under an `asyncio.Semaphore(bound)`;
4. LiteLLM: `litellm.acompletion(model="openai/...", api_base, api_key, tools)`, the tool
   call run and the second request sent by hand (LiteLLM has no agent loop), under a
   semaphore;
5. the OpenAI Agents SDK: `Agent(tools=[function_tool])` on `OpenAIChatCompletionsModel`
   with an `AsyncOpenAI(base_url, api_key)`, `Runner.run` under a semaphore, tracing off.

For each: items/s (wall) and this process's CPU per item (`time.process_time()`; the
simulator is another process), over `--rounds` interleaved rounds (median), so machine
noise hits all alike. Every run is checked: each item answered with the expected text,
the tool called once per item, the simulator served exactly two requests per item, all
200, never more than the bound in flight. A peer that is not installed is reported as
such (`pip install -e '.[peers]'`).

    python benchmarks/bench_peers.py                     # zero latency: the CPU comparison
    python benchmarks/bench_peers.py --latency-ms 50     # throughput at 50 ms a trip
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

# The script's own folder is on sys.path when run as `python benchmarks/...`.
from _sim_process import sim_process, sim_stats

import raygent
from raygent import OpenAIModel

SCRIPT = str(Path(__file__).with_name("peers_script.yaml"))
MODEL = "sim-gpt"
KEY = "sk-bench"
SYSTEM = "You answer weather questions for travellers."
ANSWER = "It is 21 C and clear in Paris."  # the script's reply after the tool result
HAND = "hand loop (asyncio + aiohttp)"
RAYGENT = "raygent"
JSON = {"content-type": "application/json", "authorization": f"Bearer {KEY}"}
TOOL_SCHEMA = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "the city's name"}},
            "required": ["city"],
        },
    },
}

calls = 0  # tool calls in the current run, every contestant's


async def weather(city: str) -> dict[str, object]:
    """The tool's body, the same for every contestant (each wraps it its own way)."""
    global calls
    calls += 1
    return {"city": city, "temp_c": 21.0, "sky": "clear"}


def question(i: int) -> str:
    return f"What's the weather in Paris? (question {i})"


Run = Callable[[int], Awaitable[None]]  # items -> None; asserts every answer


async def gathered(one: Callable[[str], Awaitable[str]], items: int, bound: int) -> None:
    """The peers' runs: one task per item, gathered under a semaphore of `bound`."""
    gate = asyncio.Semaphore(bound)

    async def bounded(i: int) -> str:
        async with gate:
            return await one(question(i))

    answers = await asyncio.gather(*(bounded(i) for i in range(items)))
    assert all(a == ANSWER for a in answers), next(a for a in answers if a != ANSWER)


# -- the contestants: each returns (run, close) ------------------------------------------


async def hand_loop(base: str, bound: int) -> tuple[Run, Callable[[], Awaitable[None]]]:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    url = base + "/v1/chat/completions"

    async def post(messages: list[dict[str, Any]]) -> dict[str, Any]:
        body = {"model": MODEL, "messages": messages, "tools": [TOOL_SCHEMA]}
        async with session.post(url, data=json.dumps(body).encode(), headers=JSON) as response:
            response.raise_for_status()
            message: dict[str, Any] = json.loads(await response.read())["choices"][0]["message"]
            return message

    async def one(text: str) -> str:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
        reply = await post(messages)
        messages.append(reply)
        for call in reply["tool_calls"]:
            result = await weather(**json.loads(call["function"]["arguments"]))
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
            )
        answer: str = (await post(messages))["content"]
        return answer

    async def run(items: int) -> None:
        answers: list[str | None] = [None] * items
        feed = iter(range(items))

        async def worker() -> None:
            for i in feed:
                answers[i] = await one(question(i))

        await asyncio.gather(*(worker() for _ in range(bound)))
        assert all(a == ANSWER for a in answers), answers[:1]

    return run, session.close


async def raygent_batch(base: str, bound: int) -> tuple[Run, Callable[[], Awaitable[None]]]:
    raygent.init("local")

    @raygent.tool
    async def get_weather(city: str) -> dict[str, object]:
        """Current weather for a city.

        Args:
            city: the city's name.
        """
        return await weather(city)

    model = OpenAIModel(MODEL, base_url=base + "/v1", api_key=KEY, max_concurrency=bound)
    agent = raygent.agent("weather", model=model, system_prompt=SYSTEM, tools=[get_weather])

    async def run(items: int) -> None:
        questions = [question(i) for i in range(items)]
        result = await raygent.batch(agent, questions, concurrency=bound, progress=False)
        assert result.report.succeeded == items, (result.report, result.items[:1])
        assert all(item.data == ANSWER for item in result.items), result.items[:1]

    async def close() -> None:
        return None  # the model's connections close with the loop, as in batch_throughput

    return run, close


async def pydantic_ai(base: str, bound: int) -> tuple[Run, Callable[[], Awaitable[None]]]:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=base + "/v1", api_key=KEY)
    agent = Agent(OpenAIChatModel(MODEL, provider=provider), instructions=SYSTEM)

    @agent.tool_plain
    async def get_weather(city: str) -> dict[str, object]:
        """Current weather for a city.

        Args:
            city: the city's name.
        """
        return await weather(city)

    async def one(text: str) -> str:
        return (await agent.run(text)).output

    async def run(items: int) -> None:
        await gathered(one, items, bound)

    async def close() -> None:
        await provider.client.close()

    return run, close


async def litellm_loop(base: str, bound: int) -> tuple[Run, Callable[[], Awaitable[None]]]:
    # Without this, importing litellm fetches its model cost map over the internet.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True

    async def complete(messages: list[Any]) -> Any:
        return await litellm.acompletion(
            model="openai/" + MODEL,
            api_base=base + "/v1",
            api_key=KEY,
            messages=messages,
            tools=[TOOL_SCHEMA],
        )

    async def one(text: str) -> str:
        messages: list[Any] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": text},
        ]
        reply = (await complete(messages)).choices[0].message
        messages.append(reply)
        for call in reply.tool_calls:
            result = await weather(**json.loads(call.function.arguments))
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
            )
        answer: str = (await complete(messages)).choices[0].message.content
        return answer

    async def run(items: int) -> None:
        await gathered(one, items, bound)

    async def close() -> None:
        return None

    return run, close


async def openai_agents(base: str, bound: int) -> tuple[Run, Callable[[], Awaitable[None]]]:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # no trace export to OpenAI
    client = AsyncOpenAI(base_url=base + "/v1", api_key=KEY)

    @function_tool
    async def get_weather(city: str) -> dict[str, object]:
        """Current weather for a city.

        Args:
            city: the city's name.
        """
        return await weather(city)

    agent = Agent(
        name="weather",
        instructions=SYSTEM,
        model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
        tools=[get_weather],
    )

    async def one(text: str) -> str:
        answer: str = (await Runner.run(agent, text)).final_output
        return answer

    async def run(items: int) -> None:
        await gathered(one, items, bound)

    return run, client.close


CONTESTANTS: dict[str, Callable[[str, int], Awaitable[tuple[Run, Any]]]] = {
    HAND: hand_loop,
    RAYGENT: raygent_batch,
    "pydantic-ai": pydantic_ai,
    "LiteLLM": litellm_loop,
    "OpenAI Agents SDK": openai_agents,
}


# -- the measurement ---------------------------------------------------------------------


async def measure(args: argparse.Namespace, base: str) -> None:
    http = aiohttp.ClientSession()
    runs: dict[str, Run] = {}
    closers: list[Callable[[], Awaitable[Any]]] = []
    missing: dict[str, str] = {}
    for name, make in CONTESTANTS.items():
        try:
            run, close = await make(base, args.bound)
        except ImportError as exc:
            missing[name] = f"not installed ({exc.name}); pip install -e '.[peers]'"
            continue
        runs[name] = run
        closers.append(close)
    rates: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    peak = 0

    async def one_run(name: str, items: int) -> tuple[float, float]:
        global calls
        nonlocal peak
        await sim_stats(base, reset=True, http=http)
        calls = 0
        started, wall = time.process_time(), time.perf_counter()
        await runs[name](items)
        wall, spent = time.perf_counter() - wall, time.process_time() - started
        stats = await sim_stats(base, http=http)
        assert calls == items, (name, calls, items)
        assert stats["requests"] == 2 * items, (name, stats)
        assert stats["by_status"] == {"200": 2 * items}, (name, stats["by_status"])
        peak = max(peak, stats["peak_in_flight"])
        return items / wall, spent * 1000 / items

    for name in runs:  # warm up: connections, pools, caches, lazy imports
        await one_run(name, args.bound * 2)
    for _ in range(args.rounds):
        for name in runs:
            rate, ms = await one_run(name, args.items)
            rates[name].append(rate)
            cpu[name].append(ms)
    for close in closers:
        await close()
    await http.close()
    median = {name: (statistics.median(rates[name]), statistics.median(cpu[name])) for name in runs}
    report(args, median, missing, peak)


def report(
    args: argparse.Namespace,
    median: dict[str, tuple[float, float]],
    missing: dict[str, str],
    peak: int,
) -> None:
    ideal = (
        f"; ideal {args.bound * 1000 / (2 * args.latency_ms):.0f} items/s"
        if args.latency_ms
        else ""
    )
    print(
        f"\n{args.items} runs a round (2 model trips + 1 tool call each), {args.bound} in "
        f"flight, {args.latency_ms} ms latency, median of {args.rounds} interleaved rounds"
        f"{ideal}\n"
    )
    hand_rate, hand_cpu = median[HAND]
    own = median.get(RAYGENT)
    head = f"{'contestant':30} {'items/s':>8} {'CPU ms/item':>12} {'items/s':>8} {'CPU':>6}"
    print(f"{'':30} {'':>8} {'':>12} {'vs hand loop':>15}", end="")
    print(f" {'vs raygent':>15}" if own else "")
    print(head + (f" {'items/s':>8} {'CPU':>6}" if own else ""))
    for name, (rate, ms) in median.items():
        line = f"{name:30} {rate:8.0f} {ms:12.2f} {rate / hand_rate:8.2f} {ms / hand_cpu:6.2f}"
        if own:
            line += f" {rate / own[0]:8.2f} {ms / own[1]:6.2f}"
        print(line)
    for name, why in missing.items():
        print(f"{name:30} {why}")
    if own:
        print()
        for name, (rate, ms) in median.items():
            if name != RAYGENT:
                print(
                    f"{name} CPU per item = {ms / own[1]:.1f}x raygent's; "
                    f"items/s = {rate / own[0]:.2f}x raygent's"
                )
    print(f"\nsimulator peak in flight over every round: {peak} (bound {args.bound})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--bound", type=int, default=64, help="runs in flight")
    parser.add_argument("--latency-ms", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with sim_process("--script", SCRIPT, "--latency-ms", str(args.latency_ms)) as base:
        asyncio.run(measure(args, base))
    print("\nreproduce: python benchmarks/bench_peers.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()

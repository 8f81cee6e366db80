"""The agent on the Ray backend, against the simulator over real HTTP: text, tool calls,
structured output, streaming, typed errors."""

from __future__ import annotations

import os
from typing import Any

import pytest
from pydantic import BaseModel
from ray_support import backend, sim_model

import raygent
from raygent.errors import AuthenticationError, PromptError, RateLimitError
from raygent.sim import Fault, Match, Reply, Rule, ToolCallReply, serve
from raygent.testing import ScriptedModel, call, reply

pytestmark = pytest.mark.usefixtures("ray_session")


@raygent.tool
def where(city: str) -> dict[str, Any]:
    """Where a tool runs (a sync tool)."""
    return {"city": city, "pid": os.getpid()}


@raygent.tool
async def where_async(city: str) -> dict[str, Any]:
    """Where an async tool runs."""
    return {"city": city, "pid": os.getpid()}


@raygent.tool
def refuse(reason: str) -> str:
    """Raises a typed raygent error."""
    raise PromptError(f"refused: {reason}")


@raygent.tool
def crash(reason: str) -> str:
    """Raises a plain exception."""
    raise RuntimeError(f"boom: {reason}")


class City(BaseModel):
    name: str
    population: int


TWO_CALLS = [
    Rule(
        match=Match(last_user="weather", after_tool_result=False),
        reply=Reply(
            text="Checking.",
            tool_calls=[
                ToolCallReply("where", {"city": "Paris"}),
                ToolCallReply("where_async", {"city": "Oslo"}),
                ToolCallReply("refuse", {"reason": "no"}),
                ToolCallReply("crash", {"reason": "bad"}),
            ],
        ),
    ),
    Rule(match=Match(after_tool_result=True), reply=Reply(text="Sunny in Paris and Oslo.")),
    Rule(match=Match(last_user="Oslo"), reply=Reply(json={"name": "Oslo", "population": 7})),
]


async def test_text_tools_and_structured_output_run_on_ray() -> None:
    async with serve(TWO_CALLS) as sim:
        model = sim_model(sim)
        bot = raygent.agent(
            model=model, tools=[where, where_async, refuse, crash], backend=backend()
        )
        plain = await bot.execute("hello")
        tools = await bot.execute("what is the weather?")
        structured = await bot.execute("Oslo?", output=City)
    assert plain.ok and plain.text == "Simulated reply to: hello"
    assert tools.ok, tools.error
    assert tools.text == "Sunny in Paris and Oslo."
    calls = tools.report.tool_calls
    # Results come back in the order the model asked, each from a Ray worker.
    assert [c.name for c in calls] == ["where", "where_async", "refuse", "crash"]
    outputs = [raygent.messages.parse_arguments(c.output or "") for c in calls[:2]]
    assert [o and o["city"] for o in outputs] == ["Paris", "Oslo"]
    assert all(o and o["pid"] != os.getpid() for o in outputs)
    # A tool's typed error stays typed; any other exception is wrapped, as locally.
    assert calls[2].error and calls[2].error["type"] == "PromptError"
    assert calls[3].error and calls[3].error["type"] == "ToolExecutionError"
    assert "RuntimeError: boom: bad" in calls[3].error["message"]
    assert structured.ok and structured.data == City(name="Oslo", population=7)


async def test_streaming_on_ray_gives_the_result_execute_gives() -> None:
    async with serve(TWO_CALLS) as sim:
        bot = raygent.agent(model=sim_model(sim), tools=[where, where_async], backend=backend())
        executed = await bot.execute("weather?")
        stream = bot.stream("weather?")
        events = [event async for event in stream]
        streamed = await stream.result
    assert streamed.ok, streamed.error
    text = "".join(e.text for e in events if e.type == "agent.trip.streaming")
    assert text == "Checking.Sunny in Paris and Oslo."
    assert {e.call_id for e in events if e.type == "agent.tool.streaming"} == {
        c.call_id for c in streamed.report.tool_calls
    }
    assert streamed.text == executed.text
    assert streamed.usage == executed.usage
    assert [(c.name, c.input, c.error) for c in streamed.report.tool_calls] == [
        (c.name, c.input, c.error) for c in executed.report.tool_calls
    ]


async def test_provider_errors_come_back_typed() -> None:
    script = [Rule(reply=Reply(fault=Fault(kind="status", status=429, retry_after=3600)))]
    async with serve(script, api_key="sk-the-right-one") as sim:
        wrong_key = await raygent.agent(model=sim_model(sim), backend=backend()).execute("hi")
        bot = raygent.agent(model=sim_model(sim, api_key="sk-the-right-one"), backend=backend())
        limited = await bot.execute("hi")
        stats = sim.stats()
    assert isinstance(wrong_key.error, AuthenticationError)
    assert wrong_key.report.status == "failed"
    # A Retry-After longer than the gateway waits for goes back at once, typed.
    assert isinstance(limited.error, RateLimitError)
    assert limited.error.details["retry_after"] == 3600
    assert stats.requests == 2


async def test_an_in_process_model_runs_in_the_caller_on_ray() -> None:
    seen: list[int] = []

    def step(messages: Any, options: Any) -> Any:
        seen.append(os.getpid())
        return (
            "in process" if len(seen) > 1 else reply(tool_calls=[call("where", {"city": "Rome"})])
        )

    model = ScriptedModel([step, step])
    result = await raygent.agent(model=model, tools=[where], backend=backend()).execute("hi")
    assert result.ok and result.text == "in process"
    assert seen == [os.getpid()] * 2
    output = raygent.messages.parse_arguments(result.report.tool_calls[0].output or "")
    assert output and output["pid"] != os.getpid()  # the tool still ran on a worker


def test_init_chooses_the_default_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(raygent.seams.registry, "_current", None)
    monkeypatch.setenv("RAYGENT_BACKEND", "local")
    assert raygent.current_backend().name == "local"
    monkeypatch.delenv("RAYGENT_BACKEND")
    assert raygent.current_backend().name == "ray"  # the default, Ray joined on first use
    chosen = raygent.init(backend="ray", namespace="raygent-tests")
    assert chosen.name == "ray" and raygent.current_backend() is chosen
    assert raygent.init(backend="local") is raygent.current_backend()
    with pytest.raises(ValueError):
        raygent.init(backend="spark")  # type: ignore[arg-type]

"""A tool that fails is visible: counted on the run's report, on each batch item's sink
row, in the batch's report and its notebook view; `tool_errors="fail"` (the agent's, a
call's, a batch's) fails the run with TOOL_EXECUTION instead of letting the model go on.
Against the simulator over HTTP, on both backends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_support import drain, make_model

import raygent
from raygent.errors import InvalidOptionsError, ToolExecutionError
from raygent.sim import Match, Reply, Rule, ToolCallReply, serve
from raygent.stores import SQLiteStore

SCRIPT = [
    Rule(match=Match(after_tool_result=True), reply=Reply(text="I could not check.")),
    Rule(reply=Reply(tool_calls=[ToolCallReply("weather", {"city": "Paris"})])),
]


@raygent.tool
def weather(city: str) -> str:
    """The weather in a city."""
    raise RuntimeError(f"the weather service is down for {city}")


def _agent(sim: Any, **options: Any) -> raygent.Agent:
    return raygent.agent("forecaster", model=make_model("openai", sim), tools=[weather], **options)


async def test_a_failed_tool_is_counted_and_the_model_goes_on_by_default() -> None:
    async with serve(SCRIPT) as sim:
        result = await _agent(sim).execute("Weather in Paris?")
        requests = sim.stats().requests
    assert result.ok and result.text == "I could not check."
    assert result.report.tool_errors == 1
    assert requests == 2  # the model read the error and answered


@pytest.mark.parametrize("where", ["agent", "call", "stream"])
async def test_tool_errors_fail_ends_the_run_with_tool_execution(where: str) -> None:
    async with serve(SCRIPT) as sim:
        if where == "agent":
            bot = _agent(sim, tool_errors="fail")
            result = await bot.execute("Weather in Paris?")
            overridden = await bot.execute("Weather in Paris?", tool_errors="continue")
        elif where == "call":
            bot = _agent(sim)
            result = await bot.execute("Weather in Paris?", tool_errors="fail")
            overridden = await bot.execute("Weather in Paris?")
        else:
            bot = _agent(sim)
            _, result = await drain(bot.stream("Weather in Paris?", tool_errors="fail"))
            _, overridden = await drain(bot.stream("Weather in Paris?"))
        requests = sim.stats().requests
    assert result.status == "failed"
    assert isinstance(result.error, ToolExecutionError)
    assert result.error.code == "TOOL_EXECUTION"
    assert result.error.details["tool"] == "weather"
    assert "the weather service is down for Paris" in result.error.message
    assert result.report.tool_errors == 1
    assert overridden.ok
    assert requests == 1 + 2  # the failed run stopped after its first trip


async def test_a_bad_tool_errors_value_is_refused_in_raygents_words() -> None:
    async with serve(SCRIPT) as sim:
        with pytest.raises(InvalidOptionsError, match='"continue" or "fail"'):
            _agent(sim, tool_errors="stop")
        result = await _agent(sim).execute("hi", tool_errors="raise")  # type: ignore[typeddict-item]
        requests = sim.stats().requests
    assert isinstance(result.error, InvalidOptionsError) and requests == 0


@pytest.mark.parametrize("mode", ["continue", "fail"])
async def test_a_batch_counts_tool_errors_per_item_and_per_job(mode: str, tmp_path: Path) -> None:
    sink = tmp_path / "out.jsonl"
    async with serve(SCRIPT) as sim:
        bot = _agent(sim, memory=raygent.Memory(store=SQLiteStore(tmp_path / "s.db")))
        items = [{"input": f"Weather {n}?", "session_id": f"s{n % 2}"} for n in range(4)]
        options: dict[str, Any] = {} if mode == "continue" else {"tool_errors": "fail"}
        result = await raygent.batch(bot, items, sink=sink, progress=False, **options)
        requests = sim.stats().requests
        history = await bot.session("s0").history()
    report = result.report
    rows = [json.loads(line) for line in sink.read_text().splitlines()]
    assert report.tool_errors == report.items_with_tool_errors == 4
    assert (
        report.first_tool_error is not None and "weather service is down" in report.first_tool_error
    )
    assert [row["tool_errors"] for row in rows] == [1, 1, 1, 1]
    view = result._repr_html_()
    assert "tool errors: 4 failed tool calls in 4 items" in view
    if mode == "continue":
        assert report.succeeded == 4 and requests == 8
        assert [m.role for m in history].count("assistant") == 4  # two turns, each 2 trips
    else:
        assert report.failed == 4 and report.errors == {"TOOL_EXECUTION": 4}
        assert report.attempts == 4  # not retried: the tool would fail again
        assert requests == 4  # no item went on after its tool failed
        assert all(row["error"]["code"] == "TOOL_EXECUTION" for row in rows)


async def test_tool_errors_on_a_batch_needs_an_agent() -> None:
    async def plain(item: Any) -> Any:
        return item

    with pytest.raises(TypeError, match="tool_errors= needs an agent"):
        await raygent.batch(plain, [1], tool_errors="fail", progress=False)
    async with serve(SCRIPT) as sim:
        with pytest.raises(ValueError, match='"continue" or "fail"'):
            await raygent.batch(_agent(sim), [1], tool_errors="yes", progress=False)  # type: ignore[typeddict-item]


async def test_tool_errors_fail_on_a_durable_run_fails_its_resume_too(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    async with serve(SCRIPT) as sim:
        bot = _agent(sim, durable=raygent.Durable(store=store), tool_errors="fail")
        result = await bot.execute("Weather in Paris?")
        again = await bot.resume(result.run_id)  # tried again: the tool fails again
        requests = sim.stats().requests
    assert result.status == "failed" and isinstance(result.error, ToolExecutionError)
    assert again.status == "failed" and again.error is not None
    assert again.error.code == "TOOL_EXECUTION"
    # Neither went on to the trip after its failed tool (the model's answer). Whether the
    # resume sends the failed step's trip again differs by backend (local: yes, Ray: no).
    assert requests in (1, 2)
    assert len(again.report.resumes) == 1 and again.report.trips[-1].finish_reason == "tool_calls"

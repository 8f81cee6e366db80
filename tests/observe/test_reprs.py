"""`repr()` of results and reports is one short line a person reads (status, counts,
cost, duration), not the whole pydantic tree; `str()` and `to_json()` keep everything."""

from __future__ import annotations

import re
from pathlib import Path

import raygent
from raygent import OpenAIModel, Pricing
from raygent.sim import Match, Reply, Rule, ToolCallReply, serve

PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=2.0)
SCRIPT = [
    Rule(match=Match(after_tool_result=True), reply=Reply(text="Sunny in Paris. " * 40)),
    Rule(reply=Reply(tool_calls=[ToolCallReply("weather", {"city": "Paris"})])),
]


@raygent.tool
def weather(city: str) -> str:
    """The weather in a city."""
    raise RuntimeError(f"the weather service is down for {city}")


def _one_short_line(text: str, limit: int = 240) -> str:
    assert "\n" not in text and len(text) <= limit, text
    return text


async def test_results_and_reports_print_as_one_short_line(tmp_path: Path) -> None:
    async with serve(SCRIPT) as sim:
        model = OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="k", pricing=PRICING)
        bot = raygent.agent("forecaster", model=model, tools=[weather])
        result = await bot.execute("Weather in Paris?")
        batch = await raygent.batch(bot, ["a", "b", "c"], progress=False, sink=tmp_path / "o.jsonl")
        failed = await bot.execute(42)  # type: ignore[arg-type]
    said = _one_short_line(repr(result))
    assert re.fullmatch(
        r"AgentResult\(completed, 'Sunny in Paris\. .*…', 2 trips, 1 tool call \(1 failed\), "
        r"\$[0-9.]+, \d+\.\d\d s\)",
        said,
    ), said
    report = _one_short_line(repr(result.report))
    assert report.startswith("AgentReport('forecaster', completed, 2 trips, 1 tool call (1 failed)")
    assert f"run_id={result.run_id!r}" in report
    trip = _one_short_line(repr(result.report.trips[0]))
    assert re.fullmatch(r"TripReport\(#0 answer, finish=tool_calls, \d+ in / \d+ out tokens, "
                        r"\d+\.\d\d s\)", trip), trip  # fmt: skip
    call = _one_short_line(repr(result.report.tool_calls[0]))
    assert call.startswith("ToolCallReport('weather', error=TOOL_EXECUTION")
    assert _one_short_line(repr(failed)).startswith("AgentResult(failed, error=INVALID_OPTIONS: ")
    line = _one_short_line(repr(batch))
    assert re.fullmatch(
        r"BatchResult\(3 items: 3 completed, 0 failed, 0 cancelled, "
        r"tool errors: 3 failed tool calls in 3 items, \d+\.\d s, \$[0-9.]+, "
        rf"sink='{re.escape(str(tmp_path / 'o.jsonl'))}'\)",
        line,
    ), line
    assert _one_short_line(repr(batch.report)).startswith("BatchReport(3 items: 3 completed")
    # The whole tree is still there for whoever asks for it.
    assert "the weather service is down" in result.report.to_json()

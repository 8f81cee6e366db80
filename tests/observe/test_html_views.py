"""Notebook views: `_repr_html_` of AgentResult, AgentReport, BatchResult and EvalReport."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from observe_support import PRICING, nested_agents

import raygent
from raygent import eval as ev
from raygent.testing import FunctionModel, ScriptedModel, call, reply

HOSTILE = "<script>alert('x')</script><img src=x onerror=alert(1)>"
TAGS = {"div", "span", "b", "table", "tr", "td", "th", "details", "summary", "br", "style"}


class _Tags(HTMLParser):
    """Every element and attribute a view produced, and the text it shows."""

    def __init__(self, markup: str) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attributes: set[str] = set()
        self.text: list[str] = []
        self.bars: list[tuple[float, float]] = []
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attributes.update(name for name, _ in attrs)
        style = dict(attrs).get("style") or ""
        found = re.fullmatch(r"left:([\d.]+)%;width:([\d.]+)%", style)
        if found:
            self.bars.append((float(found.group(1)), float(found.group(2))))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _safe(markup: str) -> _Tags:
    """Parse a view and check it runs nothing and fetches nothing."""
    parsed = _Tags(markup)
    assert parsed.tags <= TAGS, parsed.tags - TAGS
    assert parsed.attributes <= {"class", "style"}, parsed.attributes
    assert "<script" not in markup and "<img" not in markup
    assert "http://" not in markup and "https://" not in markup and "url(" not in markup
    return parsed


async def test_a_run_shows_status_usage_cost_and_a_timeline_of_every_step() -> None:
    result = await nested_agents().execute("birds?")
    assert result.ok, result.error
    markup = result._repr_html_()
    parsed = _safe(markup)
    shown = "".join(parsed.text)
    assert "editor" in shown and "completed" in shown
    assert result.usage.cost is not None
    assert f"${result.usage.cost.total:.6f}" in shown
    assert f"{result.usage.output_tokens} out" in shown
    assert "Birds, and owls hunt at night." in shown
    # A bar per trip and tool call, the nested run's included, inside the run's span.
    report = result.report
    child = next(c.child for c in report.tool_calls if c.child is not None)
    steps = len(report.trips) + len(report.tool_calls) + len(child.trips) + len(child.tool_calls)
    assert len(parsed.bars) == steps
    assert all(left + width <= 100.01 for left, width in parsed.bars)
    assert parsed.bars[0][0] < 50  # the first trip starts the run
    assert "<details>" in markup and "nested run researcher" in shown
    # The report alone renders the same timeline.
    assert len(_safe(report._repr_html_()).bars) == steps


async def test_hostile_text_in_output_arguments_and_errors_is_escaped() -> None:
    @raygent.tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    @raygent.tool
    def fail(text: str) -> str:
        """Fail."""
        raise RuntimeError(text)

    model = ScriptedModel(
        [
            reply(tool_calls=[call("echo", {"text": HOSTILE}), call("fail", {"text": HOSTILE})]),
            HOSTILE,
        ]
    )
    result = await raygent.agent(HOSTILE, model=model, tools=[echo, fail]).execute("go")
    assert result.ok and result.text == HOSTILE
    markup = result._repr_html_()
    parsed = _safe(markup)
    shown = "".join(parsed.text)
    assert shown.count("<script>alert('x')</script>") >= 3  # name, answer, tool output
    assert "&lt;script&gt;" in markup


async def test_a_failed_run_shows_its_error() -> None:
    model = ScriptedModel([RuntimeError(f"provider said {HOSTILE}")])
    result = await raygent.agent(model=model).execute("go")
    shown = "".join(_safe(result._repr_html_()).text)
    assert result.error is not None
    assert "failed" in shown and result.error.code in shown
    assert f"provider said {HOSTILE}" in shown


async def test_a_batch_shows_counts_usage_and_each_item() -> None:
    def answer(messages: list[raygent.Message], options: raygent.ModelOptions) -> str:
        text = messages[-1].text
        if text == "bad":
            raise ValueError(f"cannot do {HOSTILE}")
        return f"done {text}"

    bot = raygent.agent(model=FunctionModel(answer, pricing=PRICING))
    items = [HOSTILE, "bad", *(f"item {n}" for n in range(58))]
    result = await raygent.batch(bot, items, progress=False, retry=raygent.Retry(attempts=1))
    markup = result._repr_html_()
    parsed = _safe(markup)
    shown = "".join(parsed.text)
    assert result.report.succeeded == 59 and result.report.failed == 1
    assert "59 completed" in shown and "1 failed" in shown
    assert result.usage.cost is not None and f"${result.usage.cost.total:.6f}" in shown
    assert f"done {HOSTILE}" in shown and f"cannot do {HOSTILE}" in shown
    assert len(parsed.bars) == 50 and "… and 10 more" in shown


async def test_an_eval_shows_pass_rates_and_cases() -> None:
    bot = raygent.agent(model=FunctionModel(lambda messages, options: messages[-1].text))
    cases = [
        {"input": "Paris", "expected": "Paris"},
        {"input": HOSTILE, "expected": "something else"},
    ]
    report = await bot.eval(cases, scorers=[ev.exact()], progress=False)
    assert report.passed_count == 1 and report.passed is False
    markup = report._repr_html_()
    shown = "".join(_safe(markup).text)
    assert "1/2 passed (50%)" in shown
    assert "exact" in shown and HOSTILE in shown and "something else" in shown
    assert "✗ exact" in shown and "✓ exact" in shown


async def test_a_batch_with_a_sink_says_where_its_items_are_instead_of_an_empty_table(
    tmp_path: Path,
) -> None:
    def answer(messages: list[raygent.Message], options: raygent.ModelOptions) -> str:
        if messages[-1].text == "bad":
            raise ValueError("no")
        return "done"

    bot = raygent.agent(model=FunctionModel(answer, pricing=PRICING))
    sink = tmp_path / "out.jsonl"
    clean = await raygent.batch(bot, ["a", "b"], sink=sink, progress=False)
    mixed = await raygent.batch(
        bot,
        ["a", "bad"],
        sink=tmp_path / "mixed.jsonl",
        progress=False,
        retry=raygent.Retry(attempts=1),
    )
    clean_view, mixed_view = _safe(clean._repr_html_()), _safe(mixed._repr_html_())
    assert "table" not in clean_view.tags  # no empty table of items
    assert f"every item is in the sink: {sink}" in "".join(clean_view.text)
    assert "table" in mixed_view.tags  # its failure is listed
    assert "the items that did not complete are listed" in "".join(mixed_view.text)

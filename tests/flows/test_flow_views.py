"""A flow's report as its notebook view, as OpenTelemetry spans, and to observers: the
steps, the runs under them, a flow under an agent's tool call, on both backends."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from html.parser import HTMLParser

import pytest
from integration_support import (
    OWLS,
    Pipeline,
    broken,
    digest,
    editor,
    flaky,
    script,
    sim_model,
    writer,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import raygent
from raygent import AgentReport, FlowReport
from raygent.observers.report import RunReport
from raygent.sim import serve

HOSTILE = "<script>alert('x')</script>"
TAGS = {"div", "span", "b", "table", "tr", "td", "th", "details", "summary", "br", "style"}
STEP_HEADERS = ["step", "kind", "status", "attempts", "timeline", ""]


class _View(HTMLParser):
    """A view's elements and text; every table's rows as the text of their cells (what a
    cell folds in its <details> left out: that is the nested runs' own view); every
    <summary>'s text; the bars' placements."""

    def __init__(self, markup: str) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attributes: set[str] = set()
        self.text: list[str] = []
        self.tables: list[list[list[str]]] = []
        self.summaries: list[str] = []
        self.bars: list[tuple[float, float, str]] = []
        self._open: list[list[list[str]]] = []  # the tables being read, innermost last
        self._cells: list[int] = []  # per open table: the <details> depth of its cell
        self._details = 0
        self._summary: list[str] | None = None
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attributes.update(name for name, _ in attrs)
        found = re.fullmatch(r"left:([\d.]+)%;width:([\d.]+)%", dict(attrs).get("style") or "")
        if found:
            kind = (dict(attrs).get("class") or "").removeprefix("bar ")
            self.bars.append((float(found.group(1)), float(found.group(2)), kind))
        if tag == "table":
            self._open.append([])
            self._cells.append(-1)
            self.tables.append(self._open[-1])
        elif tag == "tr" and self._open:
            self._open[-1].append([])
        elif tag in ("td", "th") and self._open:
            self._open[-1][-1].append("")
            self._cells[-1] = self._details
        elif tag == "details":
            self._details += 1
        elif tag == "summary":
            self._summary = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self._open:
            self._open.pop()
            self._cells.pop()
        elif tag == "details":
            self._details -= 1
        elif tag == "summary" and self._summary is not None:
            self.summaries.append(" ".join("".join(self._summary).split()))
            self._summary = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._summary is not None:
            self._summary.append(data)
        if self._open and self._open[-1] and self._cells[-1] == self._details:
            row = self._open[-1][-1]
            if row:
                row[-1] += data

    @property
    def shown(self) -> str:
        return "".join(self.text)

    def steps(self) -> list[list[str]]:
        """The rows of the first steps table (the outermost flow's)."""
        table = next(t for t in self.tables if t and t[0] == STEP_HEADERS)
        return table[1:]


def _view(markup: str) -> _View:
    """Parse a view and check it runs nothing and fetches nothing."""
    parsed = _View(markup)
    assert parsed.tags <= TAGS, parsed.tags - TAGS
    assert parsed.attributes <= {"class", "style"}, parsed.attributes
    assert "<script" not in markup and "http://" not in markup and "https://" not in markup
    return parsed


def _bars(report: RunReport) -> int:
    """The bars a view of `report` draws: a flow's steps, a run's trips and tool calls,
    and every nested run's."""
    if isinstance(report, FlowReport):
        return len(report.steps) + sum(_bars(run) for run in report.runs())
    nested = sum(_bars(call.child) for call in report.tool_calls if call.child is not None)
    return len(report.trips) + len(report.tool_calls) + nested


# -- the HTML view -----------------------------------------------------------------------


async def test_a_flow_view_shows_status_usage_answer_and_each_step_with_its_runs() -> None:
    async with serve(script()) as sim:
        result = await digest(sim_model(sim)).execute("owls")
    assert result.ok, result.error
    view = _view(result._repr_html_())
    shown = view.shown
    assert "digest" in shown and "workflow" in shown and "2 steps · 3 runs" in shown
    assert result.usage.cost is not None and f"${result.usage.cost.total:.6f}" in shown
    assert f"{result.usage.requests} requests" in shown
    assert f"{result.usage.output_tokens} out" in shown
    assert result.text.startswith("Simulated reply to:") and result.text in shown
    rows = view.steps()
    assert [row[:4] for row in rows] == [
        ["research", "parallel", "completed", "1"],
        ["write", "agent", "completed", "1"],
    ]
    assert all(re.fullmatch(r"[\d.]+ ms|[\d.]+ s", row[5]) for row in rows)
    # Each run folded under its step, with its branch (branches as they ended), its own
    # view inside.
    assert sorted(view.summaries[:2]) == [
        "run researcher-a completed branch a",
        "run researcher-b completed branch b",
    ]
    assert view.summaries[2:] == ["run writer completed"]
    assert shown.count(OWLS) >= 2  # the researchers' answers, in their own views
    assert len(view.bars) == _bars(result.report) == 2 + 3 + 3 + 1
    assert all(left + width <= 100.01 for left, width, _ in view.bars)
    # The steps' bars, on the flow's span: research from the start, then write.
    research, write = [(left, width) for left, width, kind in view.bars if kind == "step"]
    assert research[0] < 10 and research[0] + research[1] <= write[0] + 0.01
    # The report alone renders the same, without the answer.
    alone = _view(result.report._repr_html_())
    assert len(alone.bars) == len(view.bars) and result.text not in alone.shown


async def test_a_failed_flow_shows_its_error_and_the_failed_step_escaped() -> None:
    async with serve(script()) as sim:
        model = sim_model(sim)
        stages = [(HOSTILE, broken(model)), ("never", broken(model))]
        result = await Pipeline(f"flow {HOSTILE}", stages).execute("go")
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "FLOW_STEP_FAILED"
    markup = result._repr_html_()
    view = _view(markup)
    assert "&lt;script&gt;" in markup
    assert f"flow {HOSTILE}" in view.shown and "failed" in view.shown
    assert f"FLOW_STEP_FAILED: {result.error.message}" in view.shown
    ((cell, kind, status, attempts, _, _),) = view.steps()  # the next step never ran
    assert (kind, status, attempts) == ("agent", "failed", "1")
    step_error = result.report.steps[0].error
    assert step_error is not None and step_error["code"] == "PROVIDER_INVALID_REQUEST"
    assert cell == f"{HOSTILE}PROVIDER_INVALID_REQUEST: {step_error['message']}"
    assert [kind for _, _, kind in view.bars if kind in ("step", "bad")] == ["bad"]
    assert view.summaries == ["run broken failed"]


async def test_a_flow_under_an_agent_s_tool_call_is_folded_with_its_steps() -> None:
    async with serve(script()) as sim:
        model = sim_model(sim)
        result = await editor(model, digest(model)).execute("edit owls")
    assert result.ok, result.error
    (call,) = result.report.tool_calls
    assert isinstance(call.child, FlowReport)
    view = _view(result._repr_html_())
    assert view.summaries[0] == "nested workflow digest completed"
    assert [row[0] for row in view.steps()] == ["research", "write"]
    assert len(view.bars) == _bars(result.report) == 3 + 9
    assert "Edited." in view.shown


async def test_a_flow_run_by_a_step_is_folded_with_its_own_steps() -> None:
    async with serve(script()) as sim:
        model = sim_model(sim)
        outer = Pipeline("outer", [("inner", digest(model, "inner")), ("finish", writer(model))])
        result = await outer.execute("owls")
    assert result.ok, result.error
    view = _view(result._repr_html_())
    assert [row[:2] for row in view.steps()] == [["inner", "agent"], ["finish", "agent"]]
    assert view.summaries[0] == "workflow inner completed"
    inner_steps = [t for t in view.tables if t and t[0] == STEP_HEADERS][1]
    assert [row[0] for row in inner_steps[1:]] == ["research", "write"]
    assert len(view.bars) == _bars(result.report) == 2 + 9 + 1
    assert "2 steps · 2 runs" in view.shown and "2 steps · 3 runs" in view.shown


async def test_a_long_flow_lists_its_first_50_steps_and_counts_the_rest() -> None:
    async with serve(script()) as sim:
        model = sim_model(sim)
        flow = Pipeline("long", [(f"s{n}", writer(model)) for n in range(53)])
        result = await flow.execute("go")
    assert result.ok, result.error
    view = _view(result._repr_html_())
    assert [row[0] for row in view.steps()] == [f"s{n}" for n in range(50)]
    assert "53 steps · 53 runs" in view.shown and "… and 3 more" in view.shown


class Panel(Pipeline):
    """The same stages, reported as a supervisor's."""

    kind = "supervisor"


async def test_a_retried_step_shows_every_attempt_s_run() -> None:
    async with serve(script()) as sim:
        result = await Panel("panel", [("ask", flaky(sim_model(sim)))], retries=1).execute("q")
    assert result.ok, result.error
    view = _view(result._repr_html_())
    assert "supervisor" in view.shown
    assert [row[:4] for row in view.steps()] == [["ask", "agent", "completed", "2"]]
    assert view.summaries == ["run flaky failed attempt 1", "run flaky completed attempt 2"]
    assert "PROVIDER_INVALID_REQUEST" in view.shown  # the failed attempt's own error


# -- OpenTelemetry -------------------------------------------------------------------------


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    yield memory
    memory.shutdown()


def _otel(exporter: InMemorySpanExporter) -> raygent.observers.OpenTelemetry:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return raygent.observers.OpenTelemetry(provider)


def _ns(at: datetime | None) -> int:
    assert at is not None
    return round(at.timestamp() * 1_000_000) * 1_000


def _named(spans: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


def _under(span: ReadableSpan, parent: ReadableSpan) -> bool:
    return (
        span.parent is not None
        and parent.context is not None
        and span.parent.span_id == parent.context.span_id
        and span.context is not None
        and span.context.trace_id == parent.context.trace_id
    )


async def test_a_flow_is_a_span_its_steps_children_and_their_runs_under_them(
    exporter: InMemorySpanExporter,
) -> None:
    async with serve(script()) as sim:
        result = await digest(sim_model(sim)).execute("owls", observe=_otel(exporter))
    assert result.ok, result.error
    spans = exporter.get_finished_spans()
    named = _named(spans)
    (root,) = named["invoke_workflow digest"]
    assert root.parent is None and root.status.status_code is StatusCode.OK
    report = result.report
    attributes = root.attributes or {}
    assert attributes["raygent.run_id"] == report.run_id == attributes["raygent.root_run_id"]
    assert attributes["raygent.kind"] == "workflow"
    assert attributes["raygent.status"] == "completed"
    assert attributes["raygent.steps"] == 2 and attributes["raygent.runs"] == 3
    assert attributes["gen_ai.usage.input_tokens"] == result.usage.total_input_tokens
    assert attributes["gen_ai.usage.output_tokens"] == result.usage.output_tokens
    assert attributes["raygent.usage.requests"] == result.usage.requests == 5
    assert result.usage.cost is not None
    assert attributes["raygent.cost_usd"] == pytest.approx(result.usage.cost.total)
    assert (root.start_time, root.end_time) == (_ns(report.started_at), _ns(report.ended_at))
    # One span a step, under the flow, with the step's times and what it is.
    (research,) = named["step research"]
    (write,) = named["step write"]
    assert _under(research, root) and _under(write, root)
    step = report.steps[0]
    assert (research.start_time, research.end_time) == (_ns(step.started_at), _ns(step.ended_at))
    research_attributes = research.attributes or {}
    assert research_attributes["raygent.step.kind"] == "parallel"
    assert research_attributes["raygent.step.status"] == "completed"
    assert research_attributes["raygent.step.attempts"] == 1
    assert research_attributes["raygent.usage.requests"] == 4  # both branches' trips
    # The step's runs under it, each with its branch; their trips and tools under them.
    branches = [named[f"invoke_agent researcher-{b}"][0] for b in ("a", "b")]
    assert all(_under(run, research) for run in branches)
    assert [(s.attributes or {})["raygent.branch"] for s in branches] == ["a", "b"]
    assert all((s.attributes or {})["raygent.parent_run_id"] == report.run_id for s in branches)
    assert all((s.attributes or {})["raygent.root_run_id"] == report.run_id for s in branches)
    (writer,) = named["invoke_agent writer"]
    assert _under(writer, write) and "raygent.branch" not in (writer.attributes or {})
    assert sum(_under(s, branches[0]) for s in spans) == 3  # 2 trips and a tool call
    assert len(spans) == 1 + 2 + 3 + 5 + 2  # flow, steps, runs, trips, tool calls


async def test_a_failed_flow_and_its_failed_step_carry_an_error_status(
    exporter: InMemorySpanExporter,
) -> None:
    async with serve(script()) as sim:
        flow = Pipeline("fragile", [("break", broken(sim_model(sim)))])
        result = await flow.execute("go", observe=_otel(exporter))
    assert result.error is not None
    named = _named(exporter.get_finished_spans())
    (root,) = named["invoke_workflow fragile"]
    (step,) = named["step break"]
    (run,) = named["invoke_agent broken"]
    assert root.status.status_code is StatusCode.ERROR
    assert (root.attributes or {})["error.type"] == "FLOW_STEP_FAILED"
    assert result.error.message in (root.status.description or "")
    assert step.status.status_code is StatusCode.ERROR and _under(step, root)
    assert (step.attributes or {})["raygent.step.status"] == "failed"
    assert run.status.status_code is StatusCode.ERROR and _under(run, step)


async def test_a_flow_under_a_tool_call_hangs_under_the_tool_span(
    exporter: InMemorySpanExporter,
) -> None:
    async with serve(script()) as sim:
        model = sim_model(sim)
        result = await editor(model, digest(model)).execute("edit", observe=_otel(exporter))
    assert result.ok, result.error
    named = _named(exporter.get_finished_spans())
    (root,) = named["invoke_agent editor"]
    (tool,) = named["execute_tool digest"]
    (flow,) = named["invoke_workflow digest"]
    assert _under(tool, root) and _under(flow, tool)
    assert all(_under(step, flow) for step in named["step research"] + named["step write"])
    attributes = flow.attributes or {}
    assert attributes["raygent.root_run_id"] == result.report.run_id
    assert attributes["raygent.parent_run_id"] == result.report.run_id
    assert (root.attributes or {})["raygent.usage.requests"] == result.usage.requests == 2 + 5


async def test_a_flow_run_by_a_step_hangs_under_the_step_s_span(
    exporter: InMemorySpanExporter,
) -> None:
    async with serve(script()) as sim:
        model = sim_model(sim)
        outer = Pipeline("outer", [("inner", digest(model, "inner")), ("finish", writer(model))])
        result = await outer.execute("owls", observe=_otel(exporter))
    assert result.ok, result.error
    spans = exporter.get_finished_spans()
    named = _named(spans)
    (root,) = named["invoke_workflow outer"]
    (step,) = named["step inner"]
    (inner,) = named["invoke_workflow inner"]
    assert _under(step, root) and _under(inner, step)
    assert all(_under(s, inner) for s in named["step research"] + named["step write"])
    assert {(s.attributes or {})["raygent.root_run_id"] for s in spans} == {result.run_id}
    inner_report = result.report.steps[0].runs[0].report
    assert (inner.attributes or {})["raygent.run_id"] == inner_report.run_id
    assert (inner.attributes or {})["raygent.parent_run_id"] == result.run_id
    assert (inner.attributes or {})["raygent.usage.requests"] == 5
    assert (root.attributes or {})["raygent.usage.requests"] == result.usage.requests == 6


async def test_a_supervisor_span_keeps_every_attempt_of_a_step(
    exporter: InMemorySpanExporter,
) -> None:
    async with serve(script()) as sim:
        panel = Panel("panel", [("ask", flaky(sim_model(sim)))], retries=1)
        result = await panel.execute("q", observe=_otel(exporter))
    assert result.ok, result.error
    named = _named(exporter.get_finished_spans())
    (root,) = named["invoke_agent panel"]  # a supervisor is an agent to the conventions
    (step,) = named["step ask"]
    assert (root.attributes or {})["raygent.kind"] == "supervisor"
    assert (root.attributes or {})["gen_ai.agent.name"] == "panel"
    assert root.status.status_code is StatusCode.OK and step.status.status_code is StatusCode.OK
    assert (step.attributes or {})["raygent.step.attempts"] == 2
    runs = named["invoke_agent flaky"]  # in the step's order
    assert [(s.attributes or {})["raygent.attempt"] for s in runs] == [1, 2]
    assert [s.status.status_code for s in runs] == [StatusCode.ERROR, StatusCode.OK]
    assert all(_under(run, step) for run in runs)


# -- observers -----------------------------------------------------------------------------


class Kept:
    def __init__(self) -> None:
        self.reports: list[RunReport] = []

    def __call__(self, report: RunReport) -> None:
        self.reports.append(report)


async def test_a_root_flow_delivers_its_report_once_and_its_runs_not_apart() -> None:
    local, registered = Kept(), Kept()
    async with serve(script()) as sim:
        flow = digest(sim_model(sim))
        with raygent.observers.add(registered), raygent.observers.observe_all(True):
            result = await flow.execute("owls", observe=local)
            quiet = await flow.execute("owls", observe=False)
    assert result.ok and quiet.ok
    assert local.reports == [result.report]
    assert registered.reports == [result.report]  # not the quiet run's
    delivered = local.reports[0]
    assert isinstance(delivered, FlowReport) and len(delivered.runs()) == 3
    assert delivered.status == "completed" and delivered.ended_at is not None


async def test_an_agent_with_a_flow_tool_delivers_one_tree() -> None:
    kept = Kept()
    async with serve(script()) as sim:
        model = sim_model(sim)
        result = await editor(model, digest(model)).execute("edit", observe=kept)
    assert result.ok, result.error
    (report,) = kept.reports
    assert isinstance(report, AgentReport) and report is result.report
    child = report.tool_calls[0].child
    assert isinstance(child, FlowReport)
    assert sorted(r.name for r in child.runs()) == ["researcher-a", "researcher-b", "writer"]
    # The tree round-trips through JSON, the flow under the call still a flow.
    again = AgentReport.from_json(report.to_json())
    assert again == report and isinstance(again.tool_calls[0].child, FlowReport)

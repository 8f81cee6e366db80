"""`raygent.observers.OpenTelemetry`: report trees as spans, with the real OpenTelemetry SDK."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import datetime

import pytest
from observe_support import PRICING, lookup, nested_agents
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import raygent
from raygent.sim import Match, Reply, Rule, ToolCallReply, serve
from raygent.testing import ScriptedModel, call, reply


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    yield memory
    memory.shutdown()


def _provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _ns(at: datetime | None) -> int:
    assert at is not None
    return round(at.timestamp() * 1_000_000) * 1_000


def _by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


async def test_a_nested_tree_becomes_run_trip_and_tool_spans(
    exporter: InMemorySpanExporter,
) -> None:
    otel = raygent.observers.OpenTelemetry(_provider(exporter))
    result = await nested_agents().execute("birds?", observe=otel, session_id="s-7")
    assert result.ok, result.error
    spans = exporter.get_finished_spans()
    named = _by_name(spans)
    (root,) = named["invoke_agent editor"]
    (inner,) = named["invoke_agent researcher"]
    assert len(spans) == 2 + 4 + 3  # two runs, four trips, three tool calls
    assert root.parent is None and root.context is not None
    report = result.report
    attributes = root.attributes or {}
    assert attributes["raygent.run_id"] == report.run_id
    assert attributes["raygent.root_run_id"] == report.run_id
    assert attributes["gen_ai.conversation.id"] == "s-7"
    assert attributes["raygent.status"] == "completed"
    assert attributes["gen_ai.usage.input_tokens"] == result.usage.total_input_tokens
    assert attributes["gen_ai.usage.output_tokens"] == result.usage.output_tokens
    assert result.usage.cost is not None
    assert attributes["raygent.cost_usd"] == pytest.approx(result.usage.cost.total)
    assert root.status.status_code is StatusCode.OK
    # Real times, from the report.
    assert (root.start_time, root.end_time) == (_ns(report.started_at), _ns(report.ended_at))
    trips = [s for s in spans if s.name == "chat scripted"]
    own_trips = [s for s in trips if s.parent and s.parent.span_id == root.context.span_id]
    assert [s.start_time for s in own_trips] == [_ns(t.timing.started_at) for t in report.trips]
    assert [s.end_time for s in own_trips] == [_ns(t.timing.ended_at) for t in report.trips]
    # Tool calls hang under their run; the nested run under the call that ran it.
    research_call = next(c for c in report.tool_calls if c.name == "researcher")
    (tool_span,) = named["execute_tool researcher"]
    assert tool_span.parent is not None and tool_span.parent.span_id == root.context.span_id
    assert (tool_span.attributes or {})["gen_ai.tool.call.id"] == research_call.call_id
    assert tool_span.context is not None and inner.parent is not None
    assert inner.parent.span_id == tool_span.context.span_id
    assert inner.context is not None and inner.context.trace_id == root.context.trace_id
    inner_attributes = inner.attributes or {}
    assert research_call.child is not None
    assert inner_attributes["raygent.run_id"] == research_call.child.run_id
    assert inner_attributes["raygent.root_run_id"] == report.run_id
    assert inner_attributes["raygent.parent_run_id"] == report.run_id
    assert inner_attributes["gen_ai.conversation.id"] == "s-7"
    # Content stays out unless asked for.
    assert not any("gen_ai.tool.call.arguments" in (s.attributes or {}) for s in spans)


async def test_failures_carry_an_error_status_and_type(exporter: InMemorySpanExporter) -> None:
    @raygent.tool
    def broken(x: int) -> str:
        """Always fails."""
        raise RuntimeError("tool broke")

    model = ScriptedModel([reply(tool_calls=[call("broken", {"x": 1})]), RuntimeError("down")])
    otel = raygent.observers.OpenTelemetry(_provider(exporter), capture_content=True)
    result = await raygent.agent(model=model, tools=[broken]).execute("go", observe=otel)
    assert result.status == "failed" and result.error is not None
    named = _by_name(exporter.get_finished_spans())
    (run_span,) = [
        s for name, spans in named.items() if name.startswith("invoke_agent") for s in spans
    ]
    assert run_span.status.status_code is StatusCode.ERROR
    assert (run_span.attributes or {})["error.type"] == result.error.code
    (tool_span,) = named["execute_tool broken"]
    assert tool_span.status.status_code is StatusCode.ERROR
    assert "tool broke" in (tool_span.status.description or "")
    assert (tool_span.attributes or {})["gen_ai.tool.call.arguments"] == '{"x": 1}'


async def test_the_root_span_joins_the_callers_current_span(
    exporter: InMemorySpanExporter,
) -> None:
    provider = _provider(exporter)
    otel = raygent.observers.OpenTelemetry(provider)
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("request") as outer:
        await raygent.agent(model=ScriptedModel(["hi"])).execute("go", observe=otel)
    run_span = next(s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent"))
    assert run_span.parent is not None
    assert run_span.parent.span_id == outer.get_span_context().span_id


async def test_against_the_simulator_over_http(exporter: InMemorySpanExporter) -> None:
    script = [
        Rule(
            match=Match(after_tool_result=False),
            reply=Reply(tool_calls=[ToolCallReply("lookup", {"topic": "tides"})]),
        ),
        Rule(match=Match(after_tool_result=True), reply=Reply(text="High at noon.")),
    ]
    otel = raygent.observers.OpenTelemetry(_provider(exporter))
    async with serve(script) as sim:
        model = raygent.OpenAIModel(
            "sim-gpt", base_url=sim.openai_base_url, api_key="sk-local", pricing=PRICING
        )
        with raygent.observers.add(otel), raygent.observers.observe_all(True):
            result = await raygent.agent(model=model, tools=[lookup]).execute("tides?")
    assert result.ok, result.error
    named = _by_name(exporter.get_finished_spans())
    trips = named["chat sim-gpt"]
    assert len(trips) == 2
    assert [(s.attributes or {})["gen_ai.usage.output_tokens"] for s in trips] == [
        t.usage.output_tokens for t in result.report.trips
    ]
    assert all((s.attributes or {})["gen_ai.provider.name"] == "openai" for s in trips)
    (tool_span,) = named["execute_tool lookup"]
    assert (tool_span.attributes or {})["raygent.trip.index"] == 0


def test_a_missing_extra_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # what an absent package looks like
    with pytest.raises(ImportError, match=r"raygent\[otel\]"):
        raygent.observers.OpenTelemetry()

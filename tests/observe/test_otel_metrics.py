"""The GenAI metrics' sources and what each counts once: the requests of each report tree
an observer is handed (nested runs, flows and a durable run's resumes included), or the
access layer's hook (`request_settled`), never both; an observer sent to another process
records into that process's providers."""

from __future__ import annotations

import json
import logging
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from observe_support import nested_agents
from otel_support import DURATION, TOKENS, Telemetry, attributes

import raygent
from raygent import Approve, Durable, OpenAIModel, Usage
from raygent.errors import ServerError
from raygent.observers.otel import RequestRecord, requests_of
from raygent.sim import Match, Reply, Rule, ToolCallReply, serve
from raygent.stores import InMemoryStore
from raygent.testing import ScriptedModel


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    kept = Telemetry()
    yield kept
    kept.close()


async def test_a_nested_tree_counts_each_runs_requests_once(telemetry: Telemetry) -> None:
    # Registered and given to the call: one observer, so it sees the tree once.
    with raygent.observers.add(telemetry.otel), raygent.observers.observe_all(True):
        result = await nested_agents().execute("birds?", observe=telemetry.otel)
    assert result.ok, result.error
    assert result.usage.requests == 4  # two trips of each run
    assert len(telemetry.chats()) == 4
    assert telemetry.count(DURATION) == 4
    assert telemetry.count(TOKENS) == 8
    inputs = telemetry.total(TOKENS, {"gen_ai.token.type": "input"})
    assert inputs == result.usage.total_input_tokens
    assert [r.model for r in requests_of(result.report)] == ["scripted"] * 4


async def test_the_access_layers_hook_records_each_request_and_reports_then_none(
    telemetry: Telemetry,
) -> None:
    """Connected to the access layer, an observer records requests as they settle and
    its reports give spans alone: no request is counted twice."""
    otel = telemetry.otel
    otel.metrics_from_reports = False  # what connecting the hook does
    usage = Usage(requests=1, input_tokens=120, output_tokens=30, cached_tokens=100)
    settled = RequestRecord(
        provider="gemini",
        model="gemini-2.5-flash",
        response_model="gemini-2.5-flash-001",
        usage=usage,
        duration=0.25,
        server_address="generativelanguage.googleapis.com",
        server_port=443,
        tenant="acme",
        job="nightly",
    )
    otel.request_settled(settled)
    result = await nested_agents().execute("birds?", observe=otel)
    assert result.ok and len(telemetry.chats()) == 4  # the spans still come
    assert telemetry.count(DURATION) == 1  # the hook's request alone
    (point,) = telemetry.points(DURATION)
    assert dict(point.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "gcp.gemini",
        "gen_ai.request.model": "gemini-2.5-flash",
        "gen_ai.response.model": "gemini-2.5-flash-001",
        "server.address": "generativelanguage.googleapis.com",
        "server.port": 443,
        "raygent.route": "online",
        "raygent.tenant": "acme",
        "raygent.job": "nightly",
    }
    assert telemetry.total(TOKENS, {"gen_ai.token.type": "input"}) == 120
    # A failed request: its duration with error.type, no tokens.
    otel.request_settled(
        RequestRecord(provider="openai", model="m", duration=1.0, error_type="PROVIDER_TIMEOUT")
    )
    assert telemetry.count(DURATION, {"error.type": "PROVIDER_TIMEOUT"}) == 1
    assert telemetry.count(TOKENS) == 2


@raygent.tool(approval=True)
def send(to: str) -> str:
    """Send a message."""
    return f"sent to {to}"


async def test_a_resumed_durable_run_counts_only_the_requests_it_made(
    backend_kind: str, telemetry: Telemetry
) -> None:
    script = [
        Rule(
            match=Match(after_tool_result=False),
            reply=Reply(tool_calls=[ToolCallReply("send", {"to": "ann"})]),
        ),
        Rule(match=Match(after_tool_result=True), reply=Reply(text="sent")),
    ]
    async with serve(script) as sim:
        model = OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-durable")
        delivered: list[Any] = []
        bot = raygent.agent(
            model=model,
            tools=[send],
            durable=Durable(store=InMemoryStore()),
            observe=[telemetry.otel, delivered.append],
        )
        paused = await bot.execute("Message ann.")
        (pending,) = paused.pending
        done = await bot.resume(paused.run_id, approvals={pending.call_id: Approve()})
        again = await bot.resume(paused.run_id, approvals={pending.call_id: Approve()})
        sent = sim.stats().requests
    assert paused.status == "awaiting_approval" and done.ok and again.ok, done.error
    assert len(done.report.trips) == 2 and sent == 2
    # The pause's report and the resume's, each with the whole run's trips: each of the
    # two requests counted once.
    assert len(delivered) == 2 and [len(r.trips) for r in delivered] == [1, 2]
    assert len(telemetry.spans("invoke_agent ")) == 2
    assert len(telemetry.chats()) == 2
    assert telemetry.count(DURATION) == sent
    assert telemetry.count(TOKENS) == 2 * sent


async def test_content_is_kept_only_when_asked_in_the_conventions_names() -> None:
    telemetry = Telemetry(capture_content=True)
    result = await nested_agents().execute("birds?", observe=telemetry.otel)
    assert result.ok, result.error
    last = max(telemetry.chats(), key=lambda s: s.end_time or 0)
    (message,) = json.loads(attributes(last)["gen_ai.output.messages"])
    assert message["role"] == "assistant" and message["finish_reason"] == "stop"
    assert message["parts"] == [{"type": "text", "content": result.text}]
    tools = telemetry.spans("execute_tool lookup")
    assert {attributes(s)["gen_ai.tool.call.arguments"] for s in tools} == {
        '{"topic": "birds"}',
        '{"topic": "owls"}',
    }
    assert all(attributes(s)["gen_ai.tool.type"] == "function" for s in tools)
    telemetry.close()


def test_a_copy_in_another_process_records_into_its_providers(
    caplog: pytest.LogCaptureFixture, telemetry: Telemetry
) -> None:
    telemetry.otel.capture_content = True
    with caplog.at_level(logging.WARNING, logger="raygent.observers"):
        copy = pickle.loads(pickle.dumps(telemetry.otel))
    assert copy.capture_content and copy.metrics_from_reports
    # This test process set no global tracer provider: the copy says it records nothing.
    assert any("raygent.observers.add" in record.getMessage() for record in caplog.records)


async def test_a_run_local_observer_of_a_batch_runs_where_the_runs_do(
    backend_kind: str, telemetry: Telemetry, tmp_path: Path
) -> None:
    """In-process the batch's runs are this process's; on Ray they are the runners',
    where the observer is a copy on their providers, and the driver counts none again."""
    items = [f"q{i}" for i in range(4)]
    async with serve([Rule(reply=Reply(text="fine"))]) as sim:
        model = OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-local")
        options: dict[str, Any] = {"observe": telemetry.otel}
        result = await raygent.batch(
            raygent.agent(model=model), items, run_options=options, progress=False
        )
    assert result.ok, result.report.errors
    here = len(items) if backend_kind == "local" else 0
    assert len(telemetry.chats()) == here
    assert telemetry.count(DURATION) == here


async def test_a_workflows_runs_are_counted_once_each_retry_included(
    backend_kind: str, telemetry: Telemetry
) -> None:
    """Every run under a flow's steps, a retried step's failed attempt included."""
    flaky = raygent.agent(
        "flaky",
        model=ScriptedModel([ServerError("down", provider="scripted"), "second time lucky"]),
    )
    reviews = {b: raygent.agent(f"review-{b}", model=ScriptedModel(["fine"])) for b in "ab"}
    flow = raygent.workflow(
        name="checked",
        steps=[
            raygent.step("draft", agent=flaky, retry=raygent.Retry(attempts=2, backoff="none")),
            raygent.step("review", parallel=reviews),
        ],
    )
    result = await flow.execute("go", observe=telemetry.otel)
    assert result.ok, result.error
    assert len(telemetry.spans("invoke_workflow checked")) == 1
    assert len(telemetry.chats()) == 4  # the failed attempt, its retry, two reviews
    assert telemetry.count(DURATION) == 4
    assert telemetry.count(DURATION, {"error.type": "PROVIDER_SERVER_ERROR"}) == 1
    assert telemetry.count(TOKENS) == 2 * 3  # the three answered
    assert [r.model for r in requests_of(result.report)] == ["scripted"] * 4

"""A flow in an agent's `tools=[...]`: a tool named after it, its arguments its input
model (else one string), its report under the tool call, its usage in the agent's, its
failure the tool's error for the model. Against the simulator, both backends."""

from __future__ import annotations

import json
from typing import Any

import pytest
from integration_support import (
    Pipeline,
    broken,
    digest,
    editor,
    researcher,
    script,
    sim_model,
    writer,
)
from pydantic import BaseModel

import raygent
from raygent import FlowReport, FlowResult
from raygent.sim import RecordedRequest, Simulator, serve
from raygent.testing import assert_routes_to, mock_router
from raygent.usage import Usage

PROVIDERS = ["openai", "anthropic"]


class Topic(BaseModel):
    topic: str
    depth: int = 1


def _system(body: dict[str, Any]) -> str:
    if "system" in body:  # Anthropic
        system = body["system"]
        return system if isinstance(system, str) else "".join(b["text"] for b in system)
    return next((m["content"] for m in body["messages"] if m["role"] == "system"), "")


def _requests(sim: Simulator, system: str) -> list[RecordedRequest]:
    """The chat requests of the agents whose system prompt is `system`, in order."""
    chats = [r for r in sim.requests if isinstance(r.body, dict) and "messages" in r.body]
    return [r for r in chats if _system(r.body) == system]


def _tools(request: RecordedRequest) -> dict[str, tuple[str, dict[str, Any]]]:
    """The tools a request offered: name -> (description, the arguments' JSON schema)."""
    out = {}
    for tool in request.body["tools"]:
        spec = tool.get("function", tool)  # OpenAI nests it; Anthropic does not
        out[spec["name"]] = (spec["description"], spec.get("parameters", spec.get("input_schema")))
    return out


def _last_user_text(request: RecordedRequest) -> str:
    content = request.body["messages"][-1]["content"]
    return content if isinstance(content, str) else "".join(b.get("text", "") for b in content)


def _carries(request: RecordedRequest, text: str) -> bool:
    """Whether `text` is somewhere in the request (a tool result, say), as sent."""
    return json.dumps(text)[1:-1] in json.dumps(request.body)


def _own_usage(report: Any) -> Usage:
    return sum((trip.usage for trip in report.trips), Usage())


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_flow_is_a_tool_of_one_string_whose_run_hangs_under_the_call(
    provider: str,
) -> None:
    async with serve(script("digest", {"input": "owls"})) as sim:
        model = sim_model(sim, provider)
        flow = digest(model)
        result = await editor(model, flow).execute("edit owls")
        first, second = _requests(sim, "edit")
    assert result.ok, result.error
    assert result.text == "Edited."
    # The tool: named after the flow, its description, one string argument.
    description, schema = _tools(first)["digest"]
    assert description == "Research a topic and write it up."
    assert schema["required"] == ["input"]
    assert schema["properties"]["input"]["type"] == "string"
    # The flow ran as a nested run: under the call, on the editor's ids.
    (call,) = result.report.tool_calls
    child = call.child
    assert isinstance(child, FlowReport) and child.status == "completed"
    assert child.name == "digest" and [s.name for s in child.steps] == ["research", "write"]
    run_id = result.report.run_id
    assert (child.parent_run_id, child.root_run_id) == (run_id, run_id)
    assert {r.root_run_id for r in child.runs()} == {run_id}
    assert {r.parent_run_id for r in child.runs()} == {child.run_id}
    # The model got the flow's answer as the tool's result.
    assert call.error is None and call.output is not None
    assert call.output.startswith("Simulated reply to: ")
    assert _carries(second, call.output)
    # The flow's usage is in the agent's: two own trips plus five of the flow's runs.
    assert child.total_usage().requests == 5
    assert result.usage == _own_usage(result.report) + child.total_usage()
    assert result.usage == result.report.total_usage() and result.usage.requests == 7
    assert result.usage.cost is not None and child.total_usage().cost is not None


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_flow_with_an_input_model_takes_its_fields_as_arguments(provider: str) -> None:
    async with serve(script("brief", {"topic": "tides", "depth": 2})) as sim:
        model = sim_model(sim, provider)
        flow = Pipeline(
            "brief",
            [("write", writer(model))],
            input_model=Topic,
            prepare=lambda topic: f"{topic.topic} at depth {topic.depth}",
        )
        result = await editor(model, flow).execute("brief me")
        (first, _) = _requests(sim, "edit")
        (written,) = _requests(sim, "write it up")
    assert result.ok, result.error
    _, schema = _tools(first)["brief"]
    assert set(schema["properties"]) == {"topic", "depth"}
    assert schema["properties"]["depth"]["type"] == "integer"
    assert schema["required"] == ["topic"]
    # The arguments reached the flow as its validated input model.
    assert _last_user_text(written) == "tides at depth 2"
    child = result.report.tool_calls[0].child
    assert isinstance(child, FlowReport) and child.status == "completed"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_failing_flow_is_the_tool_s_error_result_and_the_agent_goes_on(
    provider: str,
) -> None:
    async with serve(script("fragile", {"input": "x"})) as sim:
        model = sim_model(sim, provider)
        flow = Pipeline("fragile", [("break", broken(model)), ("after", writer(model))])
        result = await editor(model, flow).execute("try it")
        (_, second) = _requests(sim, "edit")
        wrote = _requests(sim, "write it up")
    assert result.ok, result.error  # the model saw the error and answered
    assert result.text == "Edited." and wrote == []
    (call,) = result.report.tool_calls
    assert call.error is not None and call.output is None
    message = call.error["message"]
    assert message.startswith("workflow 'fragile' failed: step 'break' failed")
    child = call.child
    assert isinstance(child, FlowReport) and child.status == "failed"
    assert child.error is not None and child.error["code"] == "FLOW_STEP_FAILED"
    assert [(s.name, s.status) for s in child.steps] == [("break", "failed")]
    assert _carries(second, message)
    assert result.usage == result.report.total_usage() == _own_usage(result.report)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_supervisor_is_a_tool_whose_routing_and_runs_hang_under_the_call(
    provider: str,
) -> None:
    async with serve(script("desk", {"input": "owls"})) as sim:
        model = sim_model(sim, provider)
        desk = raygent.supervisor(
            name="desk",
            description="Route a request to the right specialist.",
            intents={"write": writer(model), "research": researcher(model)},
            route=mock_router(["research", "write", raygent.END]),
        )
        result = await editor(model, desk).execute("edit owls")
    assert result.ok, result.error
    (call,) = result.report.tool_calls
    child = call.child
    assert isinstance(child, FlowReport) and child.kind == "supervisor"
    assert [s.kind for s in child.steps] == ["route", "intent", "route", "intent", "route"]
    assert {r.root_run_id for r in child.runs()} == {result.report.run_id}
    # The researcher took 2 trips, the writer 1; the editor 2 of its own.
    assert child.total_usage().requests == 3
    assert result.usage == _own_usage(result.report) + child.total_usage()
    assert result.usage.requests == 5
    nested = FlowResult(data=None, text="", report=child, usage=child.total_usage())
    assert_routes_to(nested, "research", iteration=1)
    assert_routes_to(nested, "write", iteration=2)

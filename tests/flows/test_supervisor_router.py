"""`raygent.router`: the routing agent against the simulator (real HTTP, scripted JSON
replies), its enum schema on both wires, its runs under the routing steps, and usage."""

from __future__ import annotations

import json
from typing import Any

import pytest
from supervisor_support import PROVIDERS, sim_model

import raygent
from raygent.errors import StepFailedError
from raygent.observers.report import AgentReport
from raygent.sim import Fault, Match, Reply, Rule, serve
from raygent.usage import Usage

ROUTER = "router of a team"  # a phrase of the router's default instructions


def specialists(provider: str, sim: Any) -> dict[str, raygent.Agent]:
    return {
        name: raygent.agent(
            name=f"{name}_bot",
            model=sim_model(provider, sim),
            system_prompt=f"You are the {name} specialist.",
        )
        for name in ("billing", "tech")
    }


def script(*decisions: dict[str, Any]) -> list[Rule]:
    return [
        Rule(match=Match(system=ROUTER), reply=[Reply(json=d) for d in decisions]),
        Rule(match=Match(system="billing specialist"), reply=Reply(text="Refunded.")),
        Rule(match=Match(system="tech specialist"), reply=Reply(text="Rebooted.")),
    ]


def chat_bodies(sim: Any) -> list[dict[str, Any]]:
    return [r.body for r in sim.requests if isinstance(r.body, dict)]


def system_text(body: dict[str, Any]) -> str:
    if isinstance(body.get("system"), str):  # Anthropic
        return str(body["system"])
    if isinstance(body.get("system"), list):
        return " ".join(part.get("text", "") for part in body["system"])
    return " ".join(str(m.get("content")) for m in body["messages"] if m["role"] == "system")


def last_user_text(body: dict[str, Any]) -> str:
    content = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    if isinstance(content, str):
        return content
    return " ".join(part.get("text", "") for part in content)


def routed_schema(provider: str, body: dict[str, Any]) -> dict[str, Any]:
    """The decision schema a router request carried: OpenAI's response_format, or (no
    native structured output) the schema the instruction shows Anthropic."""
    if provider == "openai":
        schema: dict[str, Any] = body["response_format"]["json_schema"]["schema"]
        return schema
    text = system_text(body)
    return dict(json.loads(text[text.index("{") :]))


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_router_agent_routes_against_the_simulator(provider: str) -> None:
    async with serve(script({"intent": "billing"}, {"intent": "END"})) as sim:
        intents = specialists(provider, sim)
        router = raygent.router(
            model=sim_model(provider, sim),
            intents={"billing": "Refunds and invoices.", "tech": "Devices and wifi."},
        )
        desk = raygent.supervisor(name="desk", intents=intents, router=router)
        result = await desk.execute("I was charged twice.")
        bodies = chat_bodies(sim)

    assert result.ok, result.error
    assert result.data == "Refunded."
    assert [(s.name, s.kind, s.iteration) for s in result.report.steps] == [
        ("route", "route", 1),
        ("billing", "intent", 1),
        ("route", "route", 2),
    ]
    # The intent field is an enum of the intent names plus END, on the wire.
    router_bodies = [b for b in bodies if ROUTER in system_text(b)]
    assert len(router_bodies) == 2
    schema = routed_schema(provider, router_bodies[0])
    assert schema["properties"]["intent"]["enum"] == ["billing", "tech", "END"]
    assert schema["required"] == ["intent"]
    assert "- billing: Refunds and invoices." in system_text(router_bodies[0])
    # The second routing is shown the input and what the first iteration produced.
    second = last_user_text(router_bodies[1])
    assert "I was charged twice." in second
    assert "billing answered: Refunded." in second
    assert "Nothing has been done yet." in last_user_text(router_bodies[0])


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_router_runs_hang_under_the_routing_steps_and_usage_adds_up(
    provider: str,
) -> None:
    async with serve(script({"intent": "tech"}, {"intent": "END"})) as sim:
        router = raygent.router(model=sim_model(provider, sim), intents=["billing", "tech"])
        desk = raygent.supervisor(name="desk", intents=specialists(provider, sim), router=router)
        result = await desk.execute("wifi is down")
        requests = sim.stats().requests

    assert result.ok, result.error
    route_runs = [r.report for s in result.report.steps if s.kind == "route" for r in s.runs]
    assert [r.name for r in route_runs] == ["router", "router"]
    assert all(isinstance(r, AgentReport) for r in route_runs)
    assert all(r.parent_run_id == result.run_id for r in result.report.runs())
    assert all(r.root_run_id == result.run_id for r in result.report.runs())
    intent_runs = [r.report.name for s in result.report.steps if s.kind == "intent" for r in s.runs]
    assert intent_runs == ["tech_bot"]
    # Usage: every run's, the router's included; one request a run here.
    runs = result.report.runs()
    assert len(runs) == requests == 3
    assert result.usage == sum((r.total_usage() for r in runs), Usage())
    assert result.usage == result.report.total_usage()
    assert result.usage.requests == 3 and result.usage.input_tokens > 0


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_multiple_router_fans_out(provider: str) -> None:
    decisions = ({"intents": ["billing", "tech"]}, {"intents": ["END"]})
    async with serve(script(*decisions)) as sim:
        router = raygent.router(
            model=sim_model(provider, sim), intents=["billing", "tech"], multiple=True
        )
        desk = raygent.supervisor(name="desk", intents=specialists(provider, sim), router=router)
        result = await desk.execute("charged twice and wifi down")
        body = next(b for b in chat_bodies(sim) if ROUTER in system_text(b))

    assert result.ok, result.error
    assert result.data == {"billing": "Refunded.", "tech": "Rebooted."}
    items = routed_schema(provider, body)["properties"]["intents"]
    assert items["type"] == "array" and items["minItems"] == 1
    assert items["items"]["enum"] == ["billing", "tech", "END"]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_router_reply_outside_the_enum_fails_the_routing_step(provider: str) -> None:
    async with serve(script({"intent": "refunds"})) as sim:
        router = raygent.router(model=sim_model(provider, sim), intents=["billing", "tech"])
        desk = raygent.supervisor(name="desk", intents=specialists(provider, sim), router=router)
        result = await desk.execute("x")

    # The router agent validates its output: "refunds" is not in the enum.
    assert isinstance(result.error, StepFailedError), result.error
    assert result.error.details["step"] == "route"
    assert result.error.details["cause"]["code"] == "OUTPUT_VALIDATION"
    assert [(s.name, s.status) for s in result.report.steps] == [("route", "failed")]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_router_failing_fails_the_routing_step(provider: str) -> None:
    rules = [Rule(match=Match(system=ROUTER), reply=Reply(fault=Fault(kind="status", status=500)))]
    async with serve(rules) as sim:
        router = raygent.router(model=sim_model(provider, sim), intents=["billing", "tech"])
        desk = raygent.supervisor(name="desk", intents=specialists(provider, sim), router=router)
        result = await desk.execute("x")

    assert isinstance(result.error, StepFailedError)
    assert result.error.details["cause"]["code"] == "PROVIDER_SERVER_ERROR"
    route = result.report.steps[0]
    assert route.status == "failed" and route.error is not None
    assert route.error["code"] == "PROVIDER_SERVER_ERROR"
    assert route.runs[0].report.status == "failed"


def test_router_construction() -> None:
    model = raygent.testing.ScriptedModel([])
    router = raygent.router(model=model, intents={"a": "A things"}, name="triage")
    assert router.name == "triage" and router.intents == {"a": "A things"}
    assert router.decision_model.model_json_schema()["properties"]["intent"]["enum"] == [
        "a",
        "END",
    ]
    with pytest.raises(ValueError, match="reserved"):
        raygent.router(model=model, intents=["END"])
    with pytest.raises(ValueError, match="at least one"):
        raygent.router(model=model, intents=[])
    with pytest.raises(ValueError, match="lacks"):
        raygent.supervisor(
            name="d",
            intents={"b": raygent.agent(name="b", model=model)},
            router=router,
        )
    custom = raygent.router(model=model, intents=["a"], system_prompt="Pick wisely.")
    menu = "Intents:\n- a\n- END: stop; the request is handled."
    assert custom.agent.system_prompt == f"Pick wisely.\n\n{menu}"

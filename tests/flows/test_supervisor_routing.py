"""A supervisor's loop: routing (mock_router, route functions), END, fan-out bounds,
unknown intents, max_iterations, evaluate, what `state` holds, data and outputs, and a
failing intent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel
from supervisor_support import echo, scripted

import raygent
from raygent import END, SupervisorState
from raygent.errors import (
    FlowOutputError,
    InvalidOptionsError,
    MaxIterationsError,
    RoutingError,
    ServerError,
    StepFailedError,
)
from raygent.testing import mock_router


def desk(route: Any, **kwargs: Any) -> raygent.Supervisor:
    return raygent.supervisor(
        name="desk",
        intents={"billing": echo("billing"), "tech": echo("tech")},
        route=route,
        **kwargs,
    )


def steps(result: raygent.FlowResult) -> list[tuple[str, str, int | None, str]]:
    return [(s.name, s.kind, s.iteration, s.status) for s in result.report.steps]


async def test_mock_router_routes_one_intent_then_several_then_end() -> None:
    result = await desk(mock_router(["tech", ["billing", "tech"], END])).execute("help")

    assert result.ok, result.error
    assert steps(result) == [
        ("route", "route", 1, "completed"),
        ("tech", "intent", 1, "completed"),
        ("route", "route", 2, "completed"),
        ("billing", "intent", 2, "completed"),
        ("tech", "intent", 2, "completed"),
        ("route", "route", 3, "completed"),
    ]
    # data: the last iteration's outputs by intent (several ran); outputs: every intent's
    assert result.data == {"billing": "billing: help", "tech": "tech: help"}
    assert result.outputs == {"billing": "billing: help", "tech": "tech: help"}
    assert result.report.kind == "supervisor"
    assert result.usage.requests == 3


async def test_one_intent_gives_its_output_as_data_and_text() -> None:
    result = await desk(mock_router(["billing"])).execute("refund")  # then "end"
    assert result.data == "billing: refund"
    assert result.text == "billing: refund"
    assert [s.name for s in result.report.steps] == ["route", "billing", "route"]


async def test_route_to_end_at_once_runs_nothing() -> None:
    result = await desk(lambda state: END).execute("hi")
    assert result.ok
    assert result.data is None and result.outputs == {}
    assert steps(result) == [("route", "route", 1, "completed")]
    assert result.usage.requests == 0


async def test_an_async_route_and_the_name_END_are_accepted() -> None:
    async def route(state: SupervisorState) -> Any:
        return "tech" if state.iteration == 1 else "END"

    result = await desk(route).execute("wifi")
    assert result.ok and result.data == "tech: wifi"


async def test_route_sees_input_context_iteration_outputs_and_history() -> None:
    seen: list[dict[str, Any]] = []

    def route(state: SupervisorState) -> Any:
        seen.append(
            {
                "input": state.input,
                "context": dict(state.context),
                "iteration": state.iteration,
                "outputs": dict(state.outputs),
                "history": [(h.index, h.intents, dict(h.outputs)) for h in state.history],
                "last": None if state.last is None else state.last.index,
                "run_id": state.run_id,
            }
        )
        return ["tech", ["billing", "tech"], END][state.iteration - 1]

    result = await desk(route).execute("q", context={"user": "ada"})
    assert [s["iteration"] for s in seen] == [1, 2, 3]
    assert all(s["input"] == "q" and s["context"] == {"user": "ada"} for s in seen)
    assert all(s["run_id"] == result.run_id for s in seen)
    assert seen[0]["outputs"] == {} and seen[0]["history"] == [] and seen[0]["last"] is None
    assert seen[1]["outputs"] == {"tech": "tech: q"}
    assert seen[2]["history"] == [
        (1, ("tech",), {"tech": "tech: q"}),
        (2, ("billing", "tech"), {"billing": "billing: q", "tech": "tech: q"}),
    ]
    assert seen[2]["last"] == 2


@pytest.mark.parametrize(
    ("decision", "fragment"),
    [
        ("refunds", "unknown intent(s) ['refunds']"),
        (["billing", "nope"], "unknown intent(s) ['nope']"),
        ([], "no intent"),
        (None, "not None"),
        (["billing", "billing"], "twice"),
        (["billing", END], "END together with intents"),
    ],
)
async def test_a_decision_it_cannot_run_is_a_routing_error(decision: Any, fragment: str) -> None:
    result = await desk(lambda state: decision).execute("x")

    assert isinstance(result.error, RoutingError), result.error
    assert fragment in result.error.message
    assert result.error.details["intents"] == ["billing", "tech"]
    assert steps(result) == [("route", "route", 1, "failed")]
    assert result.report.steps[0].error is not None
    assert result.report.steps[0].error["code"] == "SUPERVISOR_ROUTING"
    assert result.status == "failed" and result.usage.requests == 0


async def test_more_intents_at_once_than_max_fan_out_is_a_routing_error() -> None:
    intents = raygent.fan_out(echo("voter"), 3)
    bounded = raygent.supervisor(
        name="panel", intents=intents, route=lambda s: list(intents), max_fan_out=2
    )
    result = await bounded.execute("x")
    assert isinstance(result.error, RoutingError)
    assert result.error.details["max_fan_out"] == 2
    assert result.usage.requests == 0  # nothing ran

    exact = raygent.supervisor(
        name="panel",
        intents=intents,
        route=mock_router([list(intents)]),
        max_fan_out=3,
    )
    assert (await exact.execute("x")).ok


async def test_max_iterations_fails_typed_and_keeps_the_partial_outputs() -> None:
    result = await desk(
        mock_router(["billing", "tech"], on_exhausted="repeat"), max_iterations=3
    ).execute("x")

    assert isinstance(result.error, MaxIterationsError)
    assert result.error.details["max_iterations"] == 3
    assert result.status == "failed" and result.data is None
    assert result.outputs == {"billing": "billing: x", "tech": "tech: x"}
    # Three iterations ran intents; the fourth routing chose one more and was refused.
    assert [(s.name, s.iteration) for s in result.report.steps if s.kind == "intent"] == [
        ("billing", 1),
        ("tech", 2),
        ("tech", 3),
    ]
    assert [s.iteration for s in result.report.steps if s.kind == "route"] == [1, 2, 3, 4]


async def test_max_iterations_allows_the_routing_to_end_after_the_last() -> None:
    result = await desk(mock_router(["billing"]), max_iterations=1).execute("x")
    assert result.ok and result.data == "billing: x"


@pytest.mark.parametrize("stop", [END, True])
async def test_evaluate_ending_stops_without_routing_again(stop: Any) -> None:
    router = mock_router(["tech"], on_exhausted="repeat")
    calls: list[tuple[int, dict[str, Any]]] = []

    def evaluate(state: SupervisorState, outputs: dict[str, Any]) -> Any:
        calls.append((state.iteration, outputs))
        return stop if state.iteration == 2 else None

    result = await desk(router, evaluate=evaluate).execute("x")
    assert result.ok
    assert calls == [(1, {"tech": "tech: x"}), (2, {"tech": "tech: x"})]
    assert router.iterations == [1, 2]  # no third routing
    assert [s.kind for s in result.report.steps] == ["route", "intent"] * 2


@pytest.mark.parametrize("keep_going", [None, False, "continue"])
async def test_evaluate_returning_anything_else_continues(keep_going: Any) -> None:
    async def evaluate(state: SupervisorState, outputs: dict[str, Any]) -> Any:
        return keep_going

    result = await desk(mock_router(["tech", "billing"]), evaluate=evaluate).execute("x")
    assert result.ok
    assert [s.name for s in result.report.steps if s.kind == "intent"] == ["tech", "billing"]


@pytest.mark.parametrize(
    ("on_exhausted", "intents"),
    [("end", ["tech"]), ("repeat", ["tech", "tech", "tech"]), ("raise", ["tech"])],
)
async def test_mock_router_when_its_decisions_run_out(
    on_exhausted: Any, intents: list[str]
) -> None:
    router = mock_router(["tech"], on_exhausted=on_exhausted)
    result = await desk(router, max_iterations=3).execute("x")
    ran = [s.name for s in result.report.steps if s.kind == "intent"]
    assert ran == intents
    if on_exhausted == "end":
        assert result.ok
    elif on_exhausted == "repeat":
        assert isinstance(result.error, MaxIterationsError)
    else:
        assert isinstance(result.error, RoutingError)
        assert "no decision left" in result.error.message
    assert router.remaining == 0


async def test_mock_router_replays_its_decisions_in_every_run() -> None:
    router = mock_router(["tech", "billing"])
    sup = desk(router)
    first, second = await sup.execute("a"), await sup.execute("b")
    concurrent = await asyncio.gather(sup.execute("c"), sup.execute("d"))
    for result in (first, second, *concurrent):
        assert [s.name for s in result.report.steps if s.kind == "intent"] == ["tech", "billing"]
    assert router.iterations[:6] == [1, 2, 3, 1, 2, 3]
    assert sorted(router.iterations[6:]) == [1, 1, 2, 2, 3, 3]
    assert router.remaining == 0


async def test_mock_router_is_accepted_as_router_too() -> None:
    result = await raygent.supervisor(
        name="desk", intents={"billing": echo("billing")}, router=mock_router(["billing"])
    ).execute("x")
    assert result.ok and result.data == "billing: x"


def test_mock_router_refuses_what_is_not_a_decision() -> None:
    with pytest.raises(TypeError, match="a decision is"):
        mock_router(["billing", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="on_exhausted"):
        mock_router([], on_exhausted="loop")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="repeat"):
        mock_router([], on_exhausted="repeat")


async def test_a_failing_intent_fails_the_run_with_its_cause_and_keeps_its_siblings() -> None:
    broken = scripted("broken", ServerError("upstream down", status=500, retryable=False))
    sup = raygent.supervisor(
        name="desk",
        intents={"billing": echo("billing"), "broken": broken},
        route=mock_router([["billing", "broken"]]),
    )
    result = await sup.execute("x")

    assert isinstance(result.error, StepFailedError), result.error
    assert result.error.details["step"] == "broken"
    assert result.error.details["iteration"] == 1
    assert result.error.details["cause"]["code"] == "PROVIDER_SERVER_ERROR"
    assert isinstance(result.error.__cause__, ServerError)
    assert result.outputs == {"billing": "billing: x"}
    assert steps(result) == [
        ("route", "route", 1, "completed"),
        ("billing", "intent", 1, "completed"),
        ("broken", "intent", 1, "failed"),
    ]
    failed = result.report.steps[2]
    assert failed.error is not None and failed.error["code"] == "PROVIDER_SERVER_ERROR"
    assert failed.runs[0].report.status == "failed"


async def test_a_route_that_raises_fails_the_run_at_its_step() -> None:
    def route(state: SupervisorState) -> Any:
        raise KeyError("no such ticket")

    result = await desk(route).execute("x")
    assert isinstance(result.error, StepFailedError)
    assert result.error.details["step"] == "route"
    assert isinstance(result.error.__cause__, KeyError)
    assert steps(result) == [("route", "route", 1, "failed")]


class Ticket(BaseModel):
    subject: str
    priority: int


class Answer(BaseModel):
    reply: str


async def test_input_and_output_models_and_intent_input() -> None:
    writer = scripted("writer", '{"reply": "done"}')
    sup = raygent.supervisor(
        name="desk",
        intents={"writer": writer},
        route=mock_router(["writer"]),
        intent_input=lambda state, intent: f"{intent} handles {state.input.subject}",
        input=Ticket,
        output=Answer,
    )
    result = await sup.execute({"subject": "refund", "priority": 2})
    assert result.ok, result.error
    assert result.data == Answer(reply="done")
    assert writer.model.requests[0][0][-1].text == "writer handles refund"  # type: ignore[attr-defined]

    bad = await sup.execute({"subject": "refund"})
    assert isinstance(bad.error, InvalidOptionsError)


async def test_a_model_input_reaches_an_agent_as_json() -> None:
    sup = raygent.supervisor(
        name="desk", intents={"billing": echo("billing")}, route=mock_router(["billing"])
    )
    result = await sup.execute(Ticket(subject="s", priority=1))
    assert result.data == 'billing: {"subject":"s","priority":1}'


async def test_an_output_that_does_not_fit_the_model_is_a_flow_output_error() -> None:
    sup = raygent.supervisor(
        name="desk",
        intents={"billing": echo("billing")},
        route=mock_router(["billing"]),
        output=Answer,
    )
    result = await sup.execute("x")
    assert isinstance(result.error, FlowOutputError)
    assert result.outputs == {"billing": "billing: x"}


def test_construction_refuses_what_cannot_run() -> None:
    ok = {"billing": echo("billing")}
    with pytest.raises(TypeError, match=r"route= .* or router="):
        raygent.supervisor(name="d", intents=ok)
    with pytest.raises(TypeError, match=r"route= .* or router="):
        raygent.supervisor(name="d", intents=ok, route=lambda s: END, router=lambda s: END)
    with pytest.raises(ValueError, match="reserved"):
        raygent.supervisor(name="d", intents={"END": echo("e")}, route=lambda s: END)
    with pytest.raises(TypeError, match="not an executable"):
        raygent.supervisor(name="d", intents={"x": print}, route=lambda s: END)
    with pytest.raises(ValueError, match="max_fan_out"):
        raygent.supervisor(name="d", intents=ok, route=lambda s: END, max_fan_out=0)
    with pytest.raises(TypeError, match="intents="):
        raygent.supervisor(name="d", intents={}, route=lambda s: END)


async def test_on_failure_returning_end_completes_with_what_completed() -> None:
    broken = scripted("broken", ServerError("upstream down", status=500))
    seen: list[tuple[str, str]] = []

    def on_failure(state: SupervisorState, intent: str, error: BaseException) -> Any:
        seen.append((intent, type(error).__name__))
        return END

    sup = raygent.supervisor(
        name="desk",
        intents={"billing": echo("billing"), "broken": broken},
        route=mock_router([["billing", "broken"], "billing"]),
        on_failure=on_failure,
    )
    result = await sup.execute("x")

    assert result.ok, result.error
    assert seen == [("broken", "ServerError")]
    assert result.data == {"billing": "billing: x"}
    assert result.outputs == {"billing": "billing: x"}
    assert steps(result)[-1] == ("broken", "intent", 1, "failed")  # no routing after


async def test_on_failure_going_on_lets_the_route_choose_again() -> None:
    broken = scripted("broken", ServerError("upstream down", status=500))
    errors: list[dict[str, str]] = []

    async def on_failure(state: SupervisorState, intent: str, error: BaseException) -> Any:
        return None

    def route(state: SupervisorState) -> Any:
        if state.last is None:
            return "broken"
        errors.append({k: str(v) for k, v in state.last.errors.items()})
        return "billing" if state.last.errors else END

    sup = raygent.supervisor(
        name="desk",
        intents={"billing": echo("billing"), "broken": broken},
        route=route,
        on_failure=on_failure,
    )
    result = await sup.execute("x")

    assert result.ok, result.error
    assert errors == [{"broken": "upstream down"}, {}]
    assert result.data == "billing: x"
    assert [(s.name, s.status) for s in result.report.steps if s.kind == "intent"] == [
        ("broken", "failed"),
        ("billing", "completed"),
    ]


async def test_on_failure_raising_fails_the_run_with_its_error() -> None:
    def on_failure(state: SupervisorState, intent: str, error: BaseException) -> Any:
        raise RoutingError(f"no fallback for {intent}")

    sup = raygent.supervisor(
        name="desk",
        intents={"broken": scripted("broken", ServerError("down", status=500))},
        route=mock_router(["broken"]),
        on_failure=on_failure,
    )
    result = await sup.execute("x")
    assert isinstance(result.error, RoutingError)
    assert result.error.message == "no fallback for broken"


def test_a_router_is_shown_what_failed() -> None:
    router = raygent.router(model=raygent.testing.ScriptedModel([]), intents=["a", "b"])
    state = SupervisorState(input="q", context={}, iteration=2)
    state.history.append(
        raygent.flows.Iteration(
            index=1, intents=("a", "b"), outputs={"a": "done"}, errors={"b": ValueError("boom")}
        )
    )
    assert router.prompt(state) == (
        "Request:\nq\n\nIteration 1:\n- a answered: done\n- b failed: boom\n\n"
        "Choose for iteration 2."
    )


async def test_what_each_intent_is_given() -> None:
    # A flow gets the supervisor's input as is; an agent gets it as JSON text.
    seen: list[Any] = []

    def inner_route(state: SupervisorState) -> Any:
        seen.append(state.input)
        return "billing" if state.iteration == 1 else END

    inner = raygent.supervisor(
        name="inner", intents={"billing": echo("billing")}, route=inner_route, input=Ticket
    )
    outer = raygent.supervisor(
        name="outer",
        intents={"inner": inner, "tech": echo("tech")},
        route=mock_router([["inner", "tech"]]),
        input=Ticket,
    )
    result = await outer.execute({"subject": "s", "priority": 1})
    assert result.ok, result.error
    assert seen[0] == Ticket(subject="s", priority=1)
    assert result.data["tech"] == 'tech: {"subject":"s","priority":1}'

    # What intent_input gives an agent reaches it as is: messages too.
    chat = raygent.supervisor(
        name="chat",
        intents={"tech": echo("tech")},
        route=mock_router(["tech"]),
        intent_input=lambda state, intent: [{"role": "user", "content": "from messages"}],
    )
    assert (await chat.execute({"any": "thing"})).data == "tech: from messages"

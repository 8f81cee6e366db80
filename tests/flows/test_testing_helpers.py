"""`raygent.testing` assertions: each passes on a run that did what it says, and fails
with the report path that broke, on supervisors' results, on hand-built workflow reports
and on agents' results."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

import pytest
from pydantic import BaseModel
from supervisor_support import echo, scripted

import raygent
from raygent import END
from raygent.errors import ServerError
from raygent.observers.report import (
    AgentReport,
    FlowReport,
    ModelInfo,
    StepReport,
    StepRun,
    ToolCallReport,
)
from raygent.testing import (
    ScriptedModel,
    assert_converges,
    assert_output_shape,
    assert_routes_to,
    assert_step_passed,
    call,
    failure_path,
    mock_router,
    reply,
)

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
BROKEN = (
    "supervisor 'desk' > iteration 2 > intent 'billing' > agent 'billing_bot': "
    "failed (PROVIDER_SERVER_ERROR upstream down)"
)


class Answer(BaseModel):
    reply: str


def desk(route: Any, **kwargs: Any) -> raygent.Supervisor:
    return raygent.supervisor(
        name="desk",
        intents={"billing": echo("billing"), "tech": echo("tech")},
        route=route,
        **kwargs,
    )


async def broken_desk() -> raygent.FlowResult:
    billing = scripted("billing_bot", ServerError("upstream down", status=500))
    sup = raygent.supervisor(
        name="desk",
        intents={"billing": billing, "tech": echo("tech")},
        route=mock_router(["tech", "billing"]),
    )
    return await sup.execute("x")


def fails(fn: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(AssertionError) as caught:
        fn(*args, **kwargs)
    return str(caught.value)


# -- assert_routes_to ----------------------------------------------------------------


async def test_assert_routes_to_passes_on_what_was_routed() -> None:
    result = await desk(mock_router(["tech", ["billing", "tech"]])).execute("x")
    assert_routes_to(result, "tech")
    assert_routes_to(result, "billing", "tech")
    assert_routes_to(result, "billing", iteration=2)
    assert_routes_to(result.report, "tech", iteration=1)


async def test_assert_routes_to_fails_with_the_routings() -> None:
    result = await desk(mock_router(["tech"])).execute("x")
    assert fails(assert_routes_to, result, "billing") == (
        "supervisor 'desk' never routed to 'billing': iteration 1 > ['tech'], iteration 2 > END"
    )
    message = fails(assert_routes_to, result, "tech", iteration=2)
    assert message.startswith("supervisor 'desk' never routed to 'tech' at iteration 2:")


async def test_assert_routes_to_shows_where_a_failed_run_broke() -> None:
    result = await desk(mock_router(["refunds"])).execute("x")
    message = fails(assert_routes_to, result, "billing")
    assert message.startswith(
        "supervisor 'desk' never routed to 'billing': iteration 1 > failed (SUPERVISOR_ROUTING"
    )
    assert message.endswith(
        "; it broke at supervisor 'desk' > iteration 1 > route: failed "
        "(SUPERVISOR_ROUTING unknown intent(s) ['refunds']: the intents are ['billing', 'tech'])"
    )

    capped = await desk(mock_router(["tech"], on_exhausted="repeat"), max_iterations=1).execute("x")
    assert "iteration 2 > ['tech'] (not run)" in fails(assert_routes_to, capped, "billing")


async def test_assert_routes_to_reads_a_router_agents_decision() -> None:
    router = raygent.router(
        model=ScriptedModel(['{"intent": "billing"}']), intents=["billing", "tech"]
    )
    decided = await router.execute("charged twice")
    assert_routes_to(decided, "billing")
    assert fails(assert_routes_to, decided, "tech") == (
        "agent 'router' did not route to ['tech']: it chose ['billing']"
    )


# -- assert_converges ------------------------------------------------------------------


async def test_assert_converges_counts_iterations() -> None:
    result = await desk(mock_router(["tech", "billing"])).execute("x")
    assert assert_converges(result) == 2
    assert assert_converges(result, within=2) == 2
    assert fails(assert_converges, result, within=1) == (
        "supervisor 'desk' converged in 2 iteration(s), not within 1: "
        "iteration 1 > ['tech'], iteration 2 > ['billing'], iteration 3 > END"
    )


async def test_assert_converges_fails_with_the_path_that_broke() -> None:
    assert fails(assert_converges, await broken_desk(), within=3) == (f"did not converge: {BROKEN}")
    capped = await desk(mock_router(["tech"], on_exhausted="repeat"), max_iterations=2).execute("x")
    message = fails(assert_converges, capped)
    assert message.startswith(
        "did not converge: supervisor 'desk': failed (SUPERVISOR_MAX_ITERATIONS"
    )


def test_assert_converges_on_a_workflow_counts_the_steps_run() -> None:
    report = workflow_report(
        step("load"), step("skipped", status="skipped"), step("extract"), step("save")
    )
    assert assert_converges(report, within=3) == 3
    assert fails(assert_converges, report, within=2) == (
        "workflow 'pipeline' converged in 3 step(s), not within 2: "
        "step 'load' > step 'extract' > step 'save'"
    )


# -- assert_step_passed --------------------------------------------------------------------


async def test_assert_step_passed_on_a_supervisors_intents() -> None:
    result = await desk(mock_router(["tech", "billing"])).execute("x")
    passed = assert_step_passed(result, "billing")
    assert isinstance(passed, StepReport) and passed.iteration == 2
    assert assert_step_passed(result, "route", iteration=3).kind == "route"

    broken = await broken_desk()
    assert_step_passed(broken, "tech")
    assert fails(assert_step_passed, broken, "billing") == BROKEN
    assert fails(assert_step_passed, broken, "refunds") == (
        "supervisor 'desk' has no step 'refunds': it ran ['route', 'tech', 'route', 'billing']"
        f"; it broke at {BROKEN}"
    )


def agent_report(name: str, error: dict[str, Any] | None = None, **fields: Any) -> AgentReport:
    return AgentReport(
        run_id=f"run-{name}",
        root_run_id="root",
        name=name,
        status="failed" if error else "completed",
        started_at=NOW,
        model=ModelInfo(name="m", provider="test"),
        error=error,
        **fields,
    )


def step(
    name: str,
    status: Any = "completed",
    runs: list[StepRun] | None = None,
    error: dict[str, Any] | None = None,
    attempts: int = 1,
) -> StepReport:
    return StepReport(
        name=name,
        kind="run",
        status=status,
        attempts=attempts,
        started_at=NOW,
        error=error,
        runs=runs or [],
    )


def workflow_report(*steps: StepReport, name: str = "pipeline") -> FlowReport:
    failed = any(s.status == "failed" for s in steps)
    return FlowReport(
        kind="workflow",
        run_id=f"run-{name}",
        root_run_id="root",
        name=name,
        status="failed" if failed else "completed",
        started_at=NOW,
        steps=list(steps),
    )


INVALID = {"code": "OUTPUT_VALIDATION", "message": "reply: Field required"}


def test_assert_step_passed_on_workflow_reports() -> None:
    first = StepRun(attempt=1, report=agent_report("extractor", INVALID))
    second = StepRun(attempt=2, report=agent_report("extractor", INVALID))
    report = workflow_report(
        step("load"),
        step("extract", "failed", [first, second], error=INVALID, attempts=2),
    )
    assert assert_step_passed(report, "load").name == "load"
    assert fails(assert_step_passed, report, "extract") == (
        "workflow 'pipeline' > step 'extract' (attempt 2) > agent 'extractor': "
        "failed (OUTPUT_VALIDATION reply: Field required)"
    )


def test_assert_step_passed_follows_branches_nested_flows_and_own_errors() -> None:
    down = {"code": "PROVIDER_SERVER_ERROR", "message": "down"}
    inner = workflow_report(
        step("call", "failed", [StepRun(report=agent_report("caller", down))], error=down),
        name="inner",
    )
    parallel = step(
        "fan",
        "failed",
        [
            StepRun(branch="a", report=agent_report("a_bot")),
            StepRun(branch="b", report=inner),
        ],
        error=down,
    )
    crashed = {"code": "FLOW_STEP_FAILED", "message": "ValueError: bad row"}
    report = workflow_report(parallel, step("load", "failed", error=crashed))
    report.error = {"code": "FLOW_STEP_FAILED", "message": "fan failed", "step": "fan"}
    assert fails(assert_step_passed, report, "fan") == (
        "workflow 'pipeline' > step 'fan' > branch 'b' > workflow 'inner' > step 'call' > "
        "agent 'caller': failed (PROVIDER_SERVER_ERROR down)"
    )
    assert fails(assert_step_passed, report, "load") == (
        "workflow 'pipeline' > step 'load': failed (FLOW_STEP_FAILED ValueError: bad row)"
    )
    # The path follows the step the run's error names, else its last step that failed.
    assert failure_path(report) == fails(assert_step_passed, report, "fan")
    report.error = None
    assert failure_path(report) == fails(assert_step_passed, report, "load")
    assert fails(assert_step_passed, report, "save").startswith(
        "workflow 'pipeline' has no step 'save': it ran ['fan', 'load']; it broke at "
    )


@raygent.tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"boom: {reason}")


@raygent.tool
def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


async def test_assert_step_passed_on_an_agents_tool_calls() -> None:
    model = ScriptedModel(
        [
            reply(tool_calls=[call("lookup", {"key": "a"}), call("explode", {"reason": "x"})]),
            "done",
        ]
    )
    bot = raygent.agent(name="bot", model=model, tools=[lookup, explode])
    result = await bot.execute("go")
    assert result.ok
    passed = assert_step_passed(result, "lookup")
    assert isinstance(passed, ToolCallReport) and passed.output is not None
    message = fails(assert_step_passed, result, "explode")
    assert re.fullmatch(
        r"agent 'bot' > tool 'explode' > failed \(TOOL_EXECUTION .*boom: x.*\)", message
    ), message
    assert fails(assert_step_passed, result, "search") == (
        "agent 'bot' never called tool 'search': it called ['lookup', 'explode']"
    )


async def test_assert_step_passed_on_an_agent_whose_tool_is_a_failing_supervisor() -> None:
    broken = scripted("billing_bot", ServerError("upstream down", status=500))
    sup = raygent.supervisor(
        name="desk", intents={"billing": broken}, route=mock_router(["billing"])
    )
    model = ScriptedModel([reply(tool_calls=[call("desk", {"input": "refund"})]), "sorry"])
    bot = raygent.agent(name="concierge", model=model, tools=[sup])
    result = await bot.execute("refund me")
    assert fails(assert_step_passed, result, "desk") == (
        "agent 'concierge' > tool 'desk' > supervisor 'desk' > iteration 1 > intent 'billing' "
        "> agent 'billing_bot': failed (PROVIDER_SERVER_ERROR upstream down)"
    )


# -- assert_output_shape ---------------------------------------------------------------


async def test_assert_output_shape() -> None:
    writer = scripted("writer", '{"reply": "done"}', '{"reply": "again"}')
    typed = raygent.supervisor(
        name="desk", intents={"writer": writer}, route=mock_router(["writer"]), output=Answer
    )
    result = await typed.execute("x")
    assert assert_output_shape(result, Answer) == Answer(reply="done")

    # Untyped: a dict, or JSON text, that validates is returned as the model.
    untyped = raygent.supervisor(
        name="desk", intents={"writer": writer}, route=mock_router(["writer"])
    )
    assert assert_output_shape(await untyped.execute("x"), Answer) == Answer(reply="again")

    wrong = await desk(mock_router(["tech"])).execute("x")
    message = fails(assert_output_shape, wrong, Answer)
    assert message.startswith(
        "supervisor 'desk': data does not fit Answer (1 issue(s): (root): Invalid JSON"
    )
    assert message.endswith("; data: 'tech: x'")
    assert fails(assert_output_shape, await broken_desk(), Answer) == f"no output: {BROKEN}"


class Score(BaseModel):
    score: int


async def test_assert_output_shape_on_an_agents_result() -> None:
    model = ScriptedModel(['{"reply": "hi"}', '{"reply": "hi"}'])
    bot = raygent.agent(name="bot", model=model, output=Answer)
    assert assert_output_shape(await bot.execute("x"), Answer) == Answer(reply="hi")
    assert fails(assert_output_shape, await bot.execute("x"), Score) == (
        "agent 'bot': data does not fit Score (1 issue(s): score: Field required); "
        "data: Answer(reply='hi')"
    )
    exhausted = await bot.execute("x")  # no reply left: the run fails
    assert fails(assert_output_shape, exhausted, Answer).startswith(
        "no output: agent 'bot': failed ("
    )


def test_failure_path_of_a_completed_run_and_of_a_wrong_subject() -> None:
    assert failure_path(workflow_report(step("load"))) == "workflow 'pipeline': completed"
    with pytest.raises(TypeError):
        failure_path("not a result")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        assert_routes_to(workflow_report(step("load")), "load")
    assert END is raygent.END


async def test_failure_path_skips_failures_the_run_went_past() -> None:
    broken = scripted("broken", ServerError("down", status=500))
    sup = raygent.supervisor(
        name="desk",
        intents={"broken": broken, "tech": echo("tech")},
        route=mock_router(["broken", "tech"], on_exhausted="repeat"),
        on_failure=lambda state, intent, error: None,
        max_iterations=2,
    )
    result = await sup.execute("x")
    # The failed intent was let go; the run failed on max_iterations.
    assert failure_path(result).startswith("supervisor 'desk': failed (SUPERVISOR_MAX_ITERATIONS")
    assert fails(assert_step_passed, result, "broken") == (
        "supervisor 'desk' > iteration 1 > intent 'broken' > agent 'broken': "
        "failed (PROVIDER_SERVER_ERROR down)"
    )
    ended = await raygent.supervisor(
        name="desk",
        intents={"broken": scripted("broken", ServerError("down", status=500))},
        route=mock_router(["broken"]),
        on_failure=lambda state, intent, error: END,
    ).execute("x")
    assert ended.ok and failure_path(ended) == "supervisor 'desk': completed"

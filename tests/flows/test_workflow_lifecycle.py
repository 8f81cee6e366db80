"""A workflow step's lifecycle: skip -> before -> run -> output -> after -> next; output
schemas, the input and output models, routing, Goto loops and max_steps."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from flows_support import sim_agent, step_statuses
from pydantic import BaseModel

import raygent
from raygent.errors import FlowOutputError, InvalidOptionsError, MaxStepsError, StepFailedError
from raygent.sim import Match, Reply, Rule, serve
from raygent.testing import ScriptedModel


class Count(BaseModel):
    n: int


class Topic(BaseModel):
    topic: str
    words: int = 10


async def test_each_step_goes_through_every_hook_in_order() -> None:
    calls: list[str] = []

    def hook(label: str) -> Any:
        def record(*args: Any) -> None:
            calls.append(label)

        return record

    def skip(state: raygent.WorkflowState) -> bool:
        calls.append(f"skip {state.step}")
        return False

    async def double(state: raygent.WorkflowState) -> int:
        calls.append("run double")
        return int(state.input) * 2

    def extract(value: int) -> dict[str, int]:
        calls.append("output double")
        return {"n": value}

    def after(state: raygent.WorkflowState, output: Any) -> None:
        # By `after` the step's output is in the state as well.
        calls.append(f"after double {output} {state.outputs['double']}")

    def route(state: raygent.WorkflowState) -> None:
        calls.append("next double")

    flow = raygent.workflow(
        name="hooks",
        steps=[
            raygent.step(
                "double",
                run=double,
                skip=skip,
                before=hook("before double"),
                output=extract,
                after=after,
                next=route,
            ),
            raygent.step("inc", run=lambda s: {"n": s.last["n"] + 1}, skip=skip),
        ],
    )
    result = await flow.execute("21")
    assert result.ok, result.error
    assert calls == [
        "skip double",
        "before double",
        "run double",
        "output double",
        "after double {'n': 42} {'n': 42}",
        "next double",
        "skip inc",
    ]
    assert result.data == {"n": 43}
    assert result.text == '{"n": 43}'
    assert result.outputs == {"double": {"n": 42}, "inc": {"n": 43}}
    assert step_statuses(result) == [("double", "completed"), ("inc", "completed")]
    assert [(s.kind, s.attempts, s.iteration) for s in result.report.steps] == [
        ("run", 1, 1),
        ("run", 1, 1),
    ]
    assert result.report.kind == "workflow" and result.report.name == "hooks"


async def test_a_skipped_step_is_reported_and_its_hooks_do_not_run() -> None:
    ran: list[str] = []
    flow = raygent.workflow(
        name="skipping",
        steps=[
            raygent.step("first", run=lambda s: "one"),
            raygent.step(
                "maybe",
                run=lambda s: ran.append("run") or "two",
                skip=lambda s: s.context.get("fast", False),
                before=lambda s: ran.append("before"),
                after=lambda s, o: ran.append("after"),
                next=raygent.END,  # a skipped step goes on in order: its next is not asked
            ),
            raygent.step("last", run=lambda s: f"{s.last}!"),
        ],
    )
    fast = await flow.execute("x", context={"fast": True})
    assert fast.ok, fast.error
    assert ran == []
    assert step_statuses(fast) == [
        ("first", "completed"),
        ("maybe", "skipped"),
        ("last", "completed"),
    ]
    assert fast.outputs == {"first": "one", "last": "one!"}
    assert fast.report.step("maybe") is not None and fast.report.step("maybe").attempts == 0  # type: ignore[union-attr]

    slow = await flow.execute("x", context={"fast": False})
    assert ran == ["before", "run", "after"]
    # Its `next` is END: the last step never runs.
    assert step_statuses(slow) == [("first", "completed"), ("maybe", "completed")]
    assert slow.data == "two"


async def test_output_schemas_validate_function_and_agent_steps() -> None:
    script = [
        # An agent without structured output answers JSON text: the step validates it.
        Rule(match=Match(system="^planner"), reply=Reply(text='{"topic": "ray", "words": 3}')),
        # An agent with output=Count gives result.data as the model already.
        Rule(match=Match(system="^counter"), reply=Reply(json={"n": 7})),
    ]
    async with serve(script) as sim:
        flow = raygent.workflow(
            name="schemas",
            steps=[
                raygent.step("plan", agent=sim_agent(sim, "planner"), output=Topic),
                raygent.step("count", agent=sim_agent(sim, "counter", output=Count), output=Count),
                raygent.step("plain", run=lambda s: {"n": s.outputs["count"].n + 1}, output=Count),
            ],
        )
        result = await flow.execute("Plan a text.")
    assert result.ok, result.error
    assert result.outputs == {
        "plan": Topic(topic="ray", words=3),
        "count": Count(n=7),
        "plain": Count(n=8),
    }
    assert result.data == Count(n=8)


async def test_an_output_that_does_not_match_its_schema_is_a_flow_output_error() -> None:
    flow = raygent.workflow(
        name="mismatch",
        steps=[
            raygent.step("ok", run=lambda s: "fine"),
            raygent.step("bad", run=lambda s: {"n": "many"}, output=Count),
            raygent.step("never", run=lambda s: "unreachable"),
        ],
    )
    result = await flow.execute("x")
    assert isinstance(result.error, FlowOutputError)
    assert result.error.details["step"] == "bad"
    assert result.error.details["issues"][0]["loc"] == ("n",)
    assert result.status == "failed"
    assert step_statuses(result) == [("ok", "completed"), ("bad", "failed")]
    assert result.report.step("bad").error["code"] == "FLOW_OUTPUT"  # type: ignore[union-attr]
    # What the steps made before the failure stays on the result.
    assert result.outputs == {"ok": "fine"}


async def test_the_workflows_own_output_and_input_models() -> None:
    flow = raygent.workflow(
        name="typed",
        input=Topic,
        output=Count,
        steps=[raygent.step("measure", run=lambda s: {"n": len(s.input.topic) * s.input.words})],
    )
    result = await flow.execute('{"topic": "ray", "words": 2}')
    assert result.ok, result.error
    assert result.data == Count(n=6)
    assert result.text == '{"n":6}'

    invalid = await flow.execute({"words": 2})
    assert isinstance(invalid.error, InvalidOptionsError)
    assert invalid.report.steps == []

    wrong = raygent.workflow(
        name="wrong", output=Count, steps=[raygent.step("s", run=lambda s: {"m": 1})]
    )
    mismatch = await wrong.execute("x")
    assert isinstance(mismatch.error, FlowOutputError)
    assert mismatch.error.details["step"] is None
    assert mismatch.outputs == {"s": {"m": 1}}


async def test_next_routes_and_a_goto_loop_revisits_steps() -> None:
    def review(state: raygent.WorkflowState) -> str:
        return "ok" if len(state.outputs["draft"]) >= 3 else "redo"

    flow = raygent.workflow(
        name="loop",
        steps=[
            raygent.step("draft", run=lambda s: s.outputs.get("draft", "") + "d"),
            raygent.step(
                "review",
                run=review,
                next=lambda s: "publish" if s.outputs["review"] == "ok" else "draft",
            ),
            raygent.step("unused", run=lambda s: "never"),
            raygent.step("publish", run=lambda s: f"published {s.outputs['draft']}"),
        ],
    )
    result = await flow.execute("x")
    assert result.ok, result.error
    assert result.data == "published ddd"
    assert [(s.name, s.iteration) for s in result.report.steps] == [
        ("draft", 1),
        ("review", 1),
        ("draft", 2),
        ("review", 2),
        ("draft", 3),
        ("review", 3),
        ("publish", 1),
    ]
    # A revisited step's output is its latest.
    assert result.outputs["draft"] == "ddd"


async def test_a_loop_that_never_ends_stops_at_max_steps() -> None:
    flow = raygent.workflow(
        name="forever",
        max_steps=5,
        steps=[
            raygent.step("ping", run=lambda s: "ping"),
            raygent.step("pong", run=lambda s: "pong", next="ping"),
        ],
    )
    result = await flow.execute("x")
    assert isinstance(result.error, MaxStepsError)
    assert result.error.details == {"max_steps": 5, "last_step": "pong"}
    assert [s.name for s in result.report.steps] == ["ping", "pong", "ping", "pong", "ping"]
    assert result.outputs == {"ping": "ping", "pong": "pong"}
    assert result.status == "failed"


async def test_unknown_step_names_are_refused_when_built_or_when_run() -> None:
    with pytest.raises(TypeError, match="'nowhere', which is not a step"):
        raygent.workflow(
            name="w",
            steps=[raygent.step("a", run=lambda s: 1, next="nowhere")],
        )
    routed = raygent.workflow(
        name="routed",
        steps=[raygent.step("a", run=lambda s: 1, next=lambda s: "nowhere")],
    )
    result = await routed.execute("x")
    assert isinstance(result.error, StepFailedError)
    assert result.error.details["unknown_step"] == "nowhere"
    assert result.error.details["step"] == "a"

    def fail(state: raygent.WorkflowState) -> None:
        raise ValueError("no")

    jumped = raygent.workflow(
        name="jumped",
        steps=[raygent.step("a", run=fail, on_failure=lambda s, e: raygent.Goto("elsewhere"))],
    )
    result = await jumped.execute("x")
    assert isinstance(result.error, StepFailedError)
    assert result.error.details["unknown_step"] == "elsewhere"


def test_steps_and_workflows_are_checked_when_built() -> None:
    agent = raygent.agent(model=ScriptedModel([]), name="a")
    with pytest.raises(TypeError, match="exactly one of run=, agent= or parallel="):
        raygent.step("s")
    with pytest.raises(TypeError, match="not run, agent"):
        raygent.step("s", run=lambda s: 1, agent=agent)
    with pytest.raises(TypeError, match="agent= takes an agent"):
        raygent.step("s", agent=lambda s: 1)
    with pytest.raises(TypeError, match="input= is for agent= and parallel="):
        raygent.step("s", run=lambda s: 1, input=lambda s: 2)
    with pytest.raises(TypeError, match="two parallel branches are named 'a'"):
        raygent.step("s", parallel=[agent, agent])
    with pytest.raises(TypeError, match=r"retry= takes raygent\.Retry"):
        raygent.step("s", agent=agent, retry=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="two steps are named 's'"):
        raygent.workflow(name="w", steps=[raygent.step("s", agent=agent)] * 2)
    with pytest.raises(TypeError, match="at least one step"):
        raygent.workflow(name="w", steps=[])
    with pytest.raises(TypeError, match="max_steps"):
        raygent.workflow(name="w", steps=[raygent.step("s", agent=agent)], max_steps=0)


async def test_a_sync_step_runs_off_the_loop_an_async_one_on_it() -> None:
    loop_thread = threading.get_ident()
    seen: dict[str, int] = {}

    def blocking(state: raygent.WorkflowState) -> str:
        seen["sync"] = threading.get_ident()
        return "sync"

    async def cooperative(state: raygent.WorkflowState) -> str:
        seen["async"] = threading.get_ident()
        await asyncio.sleep(0)
        return "async"

    flow = raygent.workflow(
        name="threads",
        steps=[raygent.step("s", run=blocking), raygent.step("a", run=cooperative)],
    )
    result = await flow.execute("x")
    assert result.ok, result.error
    assert seen["sync"] != loop_thread
    assert seen["async"] == loop_thread


async def test_the_context_reaches_the_steps_and_never_the_report() -> None:
    secret = "ctx-value-4f1b9c"
    flow = raygent.workflow(
        name="ctx",
        steps=[raygent.step("use", run=lambda s: len(s.context["token"]))],
    )
    result = await flow.execute("x", context={"token": secret})
    assert result.data == len(secret)
    assert secret not in result.report.to_json()


async def test_an_agent_step_gets_the_previous_output_or_what_its_input_gives() -> None:
    async with serve([Rule(reply=Reply(text="done"))]) as sim:
        flow = raygent.workflow(
            name="inputs",
            steps=[
                raygent.step("first", agent=sim_agent(sim, "first")),
                raygent.step("shape", run=lambda s: {"said": s.last}),
                raygent.step("second", agent=sim_agent(sim, "second")),
                raygent.step("third", agent=sim_agent(sim, "third"), input=lambda s: "custom"),
            ],
        )
        result = await flow.execute("the question")
        users = [
            [m["content"] for m in r.body["messages"] if m["role"] == "user"][-1]
            for r in sim.requests
            if r.body is not None
        ]
    assert result.ok, result.error
    # The workflow's input; the previous output (a dict, as JSON text); input=.
    assert users == ["the question", '{"said": "done"}', "custom"]
    assert result.data == "done"
    assert [len(s.runs) for s in result.report.steps] == [1, 0, 1, 1]


async def test_a_failing_hook_is_the_steps_failure() -> None:
    def before(state: raygent.WorkflowState) -> None:
        raise RuntimeError("not ready")

    routes: list[str] = []
    flow = raygent.workflow(
        name="hooked",
        steps=[
            raygent.step(
                "guarded",
                run=lambda s: "never",
                before=before,
                on_failure=lambda s, e: routes.append(str(e)),  # None: the workflow fails
            ),
        ],
    )
    result = await flow.execute("x")
    assert routes == ["not ready"]
    assert isinstance(result.error, StepFailedError)
    assert result.error.details["cause"] == {"type": "RuntimeError", "message": "not ready"}
    assert result.error.details["attempts"] == 0  # the run itself never started
    assert step_statuses(result) == [("guarded", "failed")]


async def test_a_nested_workflow_gets_the_value_itself_and_an_agent_a_model_as_json() -> None:
    inner = raygent.workflow(
        name="inner", steps=[raygent.step("read", run=lambda s: s.input["n"] + 1)]
    )
    async with serve([Rule(reply=Reply(text="seen"))]) as sim:
        flow = raygent.workflow(
            name="outer",
            steps=[
                raygent.step("make", run=lambda s: {"n": 1}),
                raygent.step("nested", agent=inner, next=lambda s: raygent.Goto("tell")),
                raygent.step("skipped_over", run=lambda s: "never"),
                raygent.step("tell", agent=sim_agent(sim, "teller"), input=lambda s: Count(n=2)),
            ],
        )
        result = await flow.execute("x")
        user = [m for m in sim.requests[-1].body["messages"] if m["role"] == "user"][-1]
    assert result.ok, result.error
    assert result.outputs["nested"] == 2
    assert user["content"] == '{"n":2}'
    assert [s.name for s in result.report.steps] == ["make", "nested", "tell"]

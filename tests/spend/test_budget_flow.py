"""A job's budget holds the agents inside flows (issue #36, point 4): a batch of
workflows (two agent steps) and of supervisors (two intents in turn) under a budget of a
third of the job's cost, on both backends. Every agent run is held to the job's ledger
(the flow hands it to its runs): the spend stays within the budget plus what was in
flight, the flows that could not go on end BUDGET_EXCEEDED, the items not started say so."""

from __future__ import annotations

from typing import Any

import pytest
from spend_support import MAX_TOKENS, paid, priced_model, questions, uniform_rules

import raygent
from raygent import Budget, OpenAIModel
from raygent.sim import Latency, serve

ITEMS, CONCURRENCY = 48, 6
STEPS = 2  # model requests per item (one per agent, each one trip)


def _route(state: Any) -> Any:
    # Two intents, one after the other, then the end.
    return ("draft", "review", raygent.END)[len(state.history)]


def _question(state: Any) -> Any:
    # The review step asks the item's question too: every request costs the same.
    return state.input


def _flow(kind: str, model: OpenAIModel) -> Any:
    draft = raygent.agent(name="draft", model=model, model_options={"max_tokens": MAX_TOKENS})
    review = raygent.agent(name="review", model=model, model_options={"max_tokens": MAX_TOKENS})
    if kind == "workflow":
        steps = [
            raygent.step("draft", agent=draft),
            raygent.step("review", agent=review, input=_question),
        ]
        return raygent.workflow(name="held", steps=steps)
    return raygent.supervisor(name="held", intents={"draft": draft, "review": review}, route=_route)


@pytest.mark.parametrize("kind", ["workflow", "supervisor"])
async def test_a_jobs_budget_holds_the_agents_of_a_flow(kind: str, backend_kind: str) -> None:
    with serve(uniform_rules(), latency=Latency(fixed_ms=5)) as sim:
        model = priced_model(sim)
        probe = await raygent.agent(model=model, model_options={"max_tokens": MAX_TOKENS}).execute(
            questions(1)[0]["input"]
        )
        assert probe.usage.cost is not None
        per_request = probe.usage.cost.total
        before = paid(sim, per_request)
        budget = Budget(usd=ITEMS * STEPS * per_request / 3)
        result = await raygent.batch(
            _flow(kind, model),
            questions(ITEMS),
            concurrency=CONCURRENCY,
            budget=budget,
            retry=raygent.Retry(attempts=1),
            progress=False,
        )
        spent = paid(sim, per_request) - before
    report = result.report
    assert sorted(i.key for i in result.items) == [q["key"] for q in questions(ITEMS)]
    assert report.failed > 0 and report.errors == {"BUDGET_EXCEEDED": report.failed}
    refused = [i.error for i in result.items if i.error is not None]
    needed = max(float(e.details.get("needed") or 0.0) for e in refused)
    assert needed > 0
    # A flow that ran out mid-way ends BUDGET_EXCEEDED itself (its error is the budget's).
    started = [i for i in result.items if not i.ok and i.error.details.get("started") is not False]
    for item in started:
        assert item.result is not None and item.result.error.code == "BUDGET_EXCEEDED"
    assert all(
        i.usage.requests == 0
        for i in result.items
        if i.error is not None and i.error.details.get("started") is False
    )
    # One request in flight per item at most: each slot's reservation.
    assert spent <= budget.usd + CONCURRENCY * needed  # type: ignore[operator]
    assert spent >= budget.usd - CONCURRENCY * needed  # type: ignore[operator]
    assert report.succeeded < ITEMS
    shown = report.budget
    assert shown is not None and result.usage.cost is not None
    assert shown.spent.usd == pytest.approx(result.usage.cost.total)
    assert shown.spent.usd == pytest.approx(spent)


@pytest.mark.local_only("refused before anything runs, in this process")
async def test_a_flows_unpriced_agent_is_refused_before_a_dollar_budget_runs(
    backend_kind: str,
) -> None:
    with serve(uniform_rules()) as sim:
        priced = priced_model(sim)
        unpriced = OpenAIModel("sim-unpriced", base_url=sim.openai_base_url, api_key="sk-x")
        flow = raygent.workflow(
            name="mixed",
            steps=[
                raygent.step("a", agent=raygent.agent(model=priced)),
                raygent.step(
                    "b",
                    parallel={"x": raygent.agent(model=priced), "y": raygent.agent(model=unpriced)},
                ),
            ],
        )
        with pytest.raises(ValueError, match="sim-unpriced"):
            await raygent.batch(flow, questions(2), budget=Budget(usd=1.0), progress=False)
        assert sim.stats().requests == 0
    with pytest.raises(TypeError, match="agent or a flow"):
        await raygent.batch(lambda item: item, [1], budget=Budget(usd=1.0), progress=False)

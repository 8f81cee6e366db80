"""A batch's budget (issue #30): 1,000 items at declared prices with a budget of a third
of the job's cost. The spend (what the simulator answered, at the declared prices) stays
under the budget plus what was in flight, the rest of the items end BUDGET_EXCEEDED, and
every item is accounted once; the same on Ray with 2 runners, one SIGKILLed while it
holds a slice of the budget."""

from __future__ import annotations

import os
import signal
import uuid

import pytest
import ray
from shared_support import ray_pids
from spend_support import MAX_TOKENS, paid, priced_model, questions, uniform_rules

import raygent
from raygent import Budget
from raygent._batch import BatchItem, BatchResult
from raygent.actors import RayOptions, gateway_names, ray_backend
from raygent.actors.gateway.budget_lease import MAX_SHARE, MIN_SLICE, SLICE_FACTOR
from raygent.sim import Latency, Simulator, serve

ITEMS, CONCURRENCY, RUNNERS = 1000, 16, 2


async def _per_request(sim: Simulator, agent: raygent.Agent) -> float:
    """What one item (one request: every item is the same size) costs."""
    probe = await agent.execute(questions(1)[0]["input"])
    assert probe.usage.cost is not None and probe.usage.requests == 1
    return probe.usage.cost.total


def _check_items(result: BatchResult) -> tuple[int, float]:
    """Every item once; those not completed ended BUDGET_EXCEEDED. Returns how many
    completed and the reservation a refused request needed."""
    report = result.report
    keys = [item.key for item in result.items]
    assert sorted(keys) == sorted(q["key"] for q in questions(ITEMS))  # each once
    assert report.total == ITEMS and report.succeeded + report.failed == ITEMS
    assert report.failed > 0 and report.errors == {"BUDGET_EXCEEDED": report.failed}
    refused = [i.error for i in result.items if i.error is not None]
    assert all(e.retryable is False for e in refused)
    needed = max(e.details.get("needed", 0.0) for e in refused if e.details.get("dimension"))
    assert needed > 0
    # Items that did not start cost nothing and are not counted as tried.
    assert all(
        i.usage.requests == 0
        for i in result.items
        if i.error and not i.ok and i.error.details.get("started") is False
    )
    return report.succeeded, needed


def _check_report(result: BatchResult, budget: Budget) -> None:
    shown = result.report.budget
    assert shown is not None and shown.limit == budget
    assert result.usage.cost is not None
    assert shown.spent.usd == pytest.approx(result.usage.cost.total)
    assert shown.spent.requests == result.usage.requests
    assert shown.left["usd"] is not None and shown.left["usd"] >= 0
    assert shown.left["tokens"] is None  # not limited


async def test_a_jobs_budget_holds_on_the_local_backend() -> None:
    with serve(uniform_rules(), latency=Latency(fixed_ms=2)) as sim:
        agent = raygent.agent(model=priced_model(sim), model_options={"max_tokens": MAX_TOKENS})
        per_request = await _per_request(sim, agent)
        before = paid(sim, per_request)
        budget = Budget(usd=ITEMS * per_request / 3)
        result = await raygent.batch(
            agent, questions(ITEMS), concurrency=CONCURRENCY, budget=budget, progress=False
        )
        spent = paid(sim, per_request) - before
    completed, needed = _check_items(result)
    in_flight = CONCURRENCY * needed  # every slot's reservation
    assert spent <= budget.usd + in_flight  # type: ignore[operator]
    assert spent <= budget.usd  # type: ignore[operator]  # (replies within their reservations)
    # A request waits for those in flight; it is refused only when even with none in
    # flight it would not fit: so the job stops within one reservation of its budget.
    assert spent >= budget.usd - needed  # type: ignore[operator]
    assert completed == pytest.approx(spent / per_request)
    _check_report(result, budget)


@pytest.mark.timeout(300)
async def test_a_jobs_budget_holds_on_ray_with_a_runner_killed_holding_a_slice(
    ray_session: None,
) -> None:
    namespace = f"raygent-tests-budget-{uuid.uuid4().hex[:8]}"
    killed: list[int] = []
    with serve(uniform_rules(), latency=Latency(fixed_ms=15, jitter_ms=10)) as sim:
        backend = ray_backend(RayOptions(namespace=namespace))
        agent = raygent.agent(
            model=priced_model(sim), model_options={"max_tokens": MAX_TOKENS}, backend=backend
        )
        per_request = await _per_request(sim, agent)
        before = paid(sim, per_request)
        budget = Budget(usd=ITEMS * per_request / 3)
        done = 0

        async def kill(item: BatchItem) -> None:
            # Mid-job, a runner that holds a slice of the budget (the gateway's book says
            # which: a holder's id starts with its pid) dies.
            nonlocal done
            done += item.ok
            if killed or done < 60:
                return
            gateway = ray.get_actor(gateway_names(1)[0], namespace=namespace)
            books = await gateway.budget_stats.remote(None)
            (book,) = books.values()
            holding = [h for h, held in book["held"].items() if held[0] > 0]
            pids = [int(h.split("-")[0]) for h in holding]
            runners = ray_pids("Runner")
            pid = next(p for p in pids if p in runners)
            killed.append(pid)
            os.kill(pid, signal.SIGKILL)

        result = await raygent.batch(
            agent,
            questions(ITEMS),
            concurrency=CONCURRENCY,
            runners=RUNNERS,
            budget=budget,
            on_item=kill,
            progress=False,
        )
        spent = paid(sim, per_request) - before
    assert killed
    completed, needed = _check_items(result)
    # In flight: every slot's reservation, and the dead runner's lease (what it was
    # granted and had not reported spent when it died: a slice of its in-flight 4 times,
    # or at its rate up to an eighth of the budget).
    per_runner = CONCURRENCY // RUNNERS
    lease = max(max(MIN_SLICE, SLICE_FACTOR * (per_runner + 1)) * needed, MAX_SHARE * budget.usd)  # type: ignore[operator]
    assert spent <= budget.usd + CONCURRENCY * needed + lease  # type: ignore[operator]
    assert spent >= budget.usd / 2  # type: ignore[operator]
    # The dead runner's attempts were paid too, and their items ran again.
    assert completed <= round(spent / per_request)
    _check_report(result, budget)

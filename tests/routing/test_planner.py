"""The route planner and policy, pure: times passed in, no Ray, no clock, no HTTP."""

from __future__ import annotations

import math
import statistics

import pytest

from raygent._batch.routing import (
    Capacity,
    Demand,
    Knowledge,
    Offer,
    Refusal,
    RoutePlan,
    RoutePolicy,
    Situation,
    plan_route,
)
from raygent._batch.routing._lognormal import LogNormal
from raygent._batch.routing.learn import knowledge_of
from raygent._batch.routing.planner import MIN_ON_TIME
from raygent._batch.routing.ways import DEFAULT_BATCH, BatchTime, OnlineTime, default_online
from raygent.stores import TimingSample

HOUR = 3600.0
OFFERS = (
    Offer("batch", 0.5),
    Offer("flex", 0.5, "flex"),
    Offer("standard", 1.0, "default"),
    Offer("priority", 1.8, "priority"),
)
USUAL_BATCH = BatchTime(LogNormal(1800.0, 1.0), 0.01)
USUAL_CAPACITY = Capacity(64, requests_per_minute=500)


def situation(
    items: int = 1000,
    *,
    trips: float = 1.0,
    batch: BatchTime = USUAL_BATCH,
    online: dict | None = None,
    capacity: Capacity = USUAL_CAPACITY,
    offers: tuple[Offer, ...] = OFFERS,
    overhead: float = 35.0,
) -> Situation:
    known = Knowledge(batch=batch, online=online or default_online(300.0))
    return Situation(Demand(items, trips), offers, known, capacity, overhead=overhead)


def planned(found: RoutePlan | Refusal) -> RoutePlan:
    assert isinstance(found, RoutePlan), found
    return found


def test_a_deadline_a_batch_meets_goes_by_batch_rescued_online() -> None:
    plan = planned(plan_route(situation(), 6 * HOUR))
    assert plan.items == {"batch": 1000}
    assert plan.rescue == "flex" and plan.cutoff is not None
    assert 0 < plan.cutoff < 6 * HOUR and plan.on_time > 0.95
    assert plan.cost is not None and plan.online_cost == 1000.0
    assert plan.cost / plan.online_cost < 0.51
    assert plan.finish < plan.finish_high < 6 * HOUR


def test_a_deadline_too_tight_for_batch_goes_flex_then_standard_then_priority() -> None:
    # 30 minutes: a 30-minute median batch is likelier late than not: flex from the start.
    assert planned(plan_route(situation(), 1800)).items == {"flex": 1000}
    # A minute: flex (2.5x slower, 5% refused) no longer fits for all; standard takes some.
    tight = planned(plan_route(situation(100), 60))
    assert "batch" not in tight.items and tight.items.get("standard", 0) > 0
    # 12 seconds for 10 items: only priority's latency fits (standard: 13.6 s at 95%).
    fast = planned(plan_route(situation(10), 12))
    assert fast.items == {"priority": 10} and fast.cost == pytest.approx(18.0)
    assert isinstance(plan_route(situation(10), 8), Refusal)


def test_a_rate_limit_splits_items_between_batch_and_online() -> None:
    # 20,000 items at 500 requests a minute take 40 minutes online: a 2-hour deadline
    # can rescue only part of them, so part go online from the start, or by batch bare.
    plan = planned(plan_route(situation(20_000), 2 * HOUR))
    assert sum(plan.items.values()) == 20_000
    assert plan.cost is not None and plan.cost < 20_000 * 0.9


def test_an_impossible_deadline_is_refused_with_the_earliest_that_can_be_met() -> None:
    big = situation(100_000)
    refused = plan_route(big, HOUR)
    assert isinstance(refused, Refusal) and refused.constraint == "deadline"
    assert refused.earliest is not None and refused.earliest > HOUR
    assert isinstance(plan_route(big, refused.earliest * 1.02), RoutePlan)
    assert isinstance(plan_route(big, refused.earliest * 0.95), Refusal)


def test_a_budget_too_small_is_refused_with_the_least_that_meets_the_deadline() -> None:
    job = situation(1000, trips=2.0)
    refused = plan_route(job, 6 * HOUR, budget=100.0)
    assert isinstance(refused, Refusal) and refused.constraint == "budget"
    assert refused.least_budget == pytest.approx(1000.0)  # 2 trips by batch at 0.5
    assert isinstance(plan_route(job, 6 * HOUR, budget=refused.least_budget), RoutePlan)
    # A budget that all-flex meets, at a deadline only faster ways meet (it is refused
    # for the budget, with the earliest deadline flex meets within it).
    tight = situation(1000, capacity=Capacity(8))
    flex = planned(plan_route(tight, 3000))
    assert flex.items == {"flex": 1000}
    fastest = plan_route(tight, 1.0)
    assert isinstance(fastest, Refusal) and fastest.earliest is not None
    soon = fastest.earliest * 1.05
    assert (planned(plan_route(tight, soon)).cost or 0) > (flex.cost or 0) * 1.01
    priced = plan_route(tight, soon, budget=(flex.cost_high or 0) * 1.01)
    assert isinstance(priced, Refusal) and priced.constraint == "budget"
    assert priced.earliest is not None and soon < priced.earliest <= 3000
    assert isinstance(plan_route(tight, priced.earliest * 1.02, budget=flex.cost_high), RoutePlan)


def test_more_trips_cost_more_and_need_more_time() -> None:
    one = planned(plan_route(situation(), 6 * HOUR))
    two = planned(plan_route(situation(trips=2.0), 6 * HOUR))
    assert two.cost == pytest.approx(2 * (one.cost or 0), rel=0.05)
    assert two.finish > one.finish
    assert two.on_time < one.on_time


def test_stalling_batches_are_avoided_and_higher_confidence_cuts_earlier() -> None:
    stalling = BatchTime(LogNormal(600.0, 0.5), stall=0.6)
    assert "batch" not in planned(plan_route(situation(batch=stalling), 6 * HOUR)).items
    usual = planned(plan_route(situation(), 6 * HOUR, confidence=0.8))
    careful = planned(plan_route(situation(), 6 * HOUR, confidence=0.99))
    assert careful.cutoff is not None and usual.cutoff is not None
    assert careful.cutoff < usual.cutoff
    with pytest.raises(ValueError):
        plan_route(situation(), HOUR, confidence=1.0)


def test_a_model_without_a_batch_api_or_flex_plans_with_what_it_has() -> None:
    standard_only = (Offer("standard", 1.0),)
    plan = planned(plan_route(situation(offers=standard_only), 6 * HOUR))
    assert plan.items == {"standard": 1000} and plan.cost == plan.online_cost
    batch_and_standard = (Offer("batch", 0.5), Offer("standard", 1.0))
    plan = planned(plan_route(situation(offers=batch_and_standard), 6 * HOUR))
    assert plan.items == {"batch": 1000} and plan.rescue == "standard"


def test_an_empty_job_plans_nothing() -> None:
    plan = planned(plan_route(situation(0), HOUR))
    assert plan.items == {} and plan.cost == 0.0


def test_the_policy_shares_items_by_their_keys_as_planned() -> None:
    job = situation(20_000)
    plan = planned(plan_route(job, 2 * HOUR))
    policy = RoutePolicy.of(plan, job, start=1_000.0)
    ways = [policy.way_of(f"item-{i}") for i in range(20_000)]
    for way, count in plan.items.items():
        assert ways.count(way) / 20_000 == pytest.approx(count / 20_000, abs=0.015)
    assert [policy.way_of(f"item-{i}") for i in range(50)] == ways[:50]  # stable


def test_the_policy_moves_a_batch_trip_online_as_its_cutoff_nears() -> None:
    job = situation(1000, trips=2.0)
    plan = planned(plan_route(job, 6 * HOUR))
    policy = RoutePolicy.of(plan, job, start=0.0)
    first, second = policy.cutoff(0), policy.cutoff(1)
    assert first is not None and second is not None and first < second < 6 * HOUR
    assert policy.trip_way("batch", 0, now=0.0) == ("batch", None)
    # Once its batch is no longer likely (80%) back before the first trip's cutoff, that
    # trip goes by the rescue way.
    late = first - policy.overhead - policy.round_time.quantile(MIN_ON_TIME) + 1
    assert policy.trip_way("batch", 0, now=late) == (plan.rescue, "deadline")
    # The second trip has a later cutoff: at that time it still goes by batch.
    assert policy.trip_way("batch", 1, now=late) == ("batch", None)
    assert policy.trip_way("flex", 0, now=late) == ("flex", None)
    assert policy.tier("flex") == "flex" and policy.tier("standard") == "default"


def test_learning_moves_the_defaults_towards_what_was_seen() -> None:
    none = knowledge_of([], output_tokens=300.0, batch_prior=DEFAULT_BATCH)
    assert none.batch == DEFAULT_BATCH
    seen = [TimingSample("batch", s, True) for s in (60.0, 70.0, 80.0, 65.0, 75.0) * 10]
    seen.append(TimingSample("batch", 900.0, False))  # one never came back in time
    known = knowledge_of(seen, output_tokens=300.0, batch_prior=DEFAULT_BATCH)
    assert 60.0 < known.batch.turnaround.median < 120.0
    assert known.batch.turnaround.spread < DEFAULT_BATCH.turnaround.spread
    assert known.batch.stall == pytest.approx((1 + 2 * 0.01) / (51 + 2))
    flex = [TimingSample("flex", 2.0, True)] * 8 + [TimingSample("flex", 0.0, False)] * 2
    known = knowledge_of(flex, output_tokens=300.0, batch_prior=DEFAULT_BATCH)
    assert known.online["flex"].refused == pytest.approx((2 + 2 * 0.05) / 12)
    assert known.online["flex"].latency.median < default_online(300.0)["flex"].latency.median
    # What was learnt changes the plan: batches seen taking a minute make a 10-minute
    # deadline one for batch.
    fast = knowledge_of(seen, output_tokens=300.0, batch_prior=DEFAULT_BATCH)
    job = situation(batch=fast.batch)
    assert "batch" in planned(plan_route(job, 600)).items
    assert "batch" not in planned(plan_route(situation(), 600)).items


def test_lognormal_sums_keep_the_mean_and_quantiles_order() -> None:
    one = LogNormal(10.0, 0.8)
    three = one.sum_of(3)
    assert three.mean == pytest.approx(3 * one.mean)
    assert three.quantile(0.5) < three.quantile(0.95) < 3 * one.quantile(0.95)
    assert one.cdf(one.quantile(0.9)) == pytest.approx(0.9)
    fitted = LogNormal.fit([math.exp(x) for x in (1.0, 2.0, 3.0)])
    assert fitted is not None and fitted.median == pytest.approx(math.exp(2.0))
    assert statistics.median([LogNormal(5.0).quantile(q) for q in (0.1, 0.9)]) == 5.0
    assert OnlineTime(LogNormal(1.0)).refused == 0.0

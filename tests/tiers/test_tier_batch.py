"""A job at a tier (issue 40.5), on both backends: `raygent.batch(..., service_tier=)`
sends every item's requests at it, prices them at it and counts them by tier (and the
fallbacks); `raygent.estimate(..., service_tier=)` prices the job at it."""

from __future__ import annotations

import pytest
from tiers_support import asked, model, rules

import raygent
from raygent.sim import ServiceTiers, serve

ITEMS = [f"question {i:03d}" for i in range(8)]


def _total(result: raygent.BatchResult) -> float:
    assert result.ok, result.report
    cost = raygent.total_cost(result.usage)
    assert cost is not None
    return cost


async def test_a_job_at_flex_is_sent_priced_and_counted_at_flex(backend_kind: str) -> None:
    with serve(rules()) as sim:
        # The agent asks for priority: the job's tier is over it.
        agent = raygent.agent(model=model(sim), model_options={"service_tier": "priority"})
        online = await raygent.batch(agent, ITEMS, service_tier="default", progress=False)
        sim.reset()
        flex = await raygent.batch(agent, ITEMS, service_tier="flex", progress=False)
        assert asked(sim) == ["flex"] * len(ITEMS)
    assert online.report.tiers == {"default": len(ITEMS)}
    assert flex.report.tiers == {"flex": len(ITEMS)} and flex.report.tier_fallbacks == 0
    assert _total(flex) == pytest.approx(_total(online) * 0.5)


async def test_a_jobs_refused_flex_requests_fall_back_and_are_counted(backend_kind: str) -> None:
    tier = raygent.Tier("flex", fallback="default")
    with serve(rules(), tiers=ServiceTiers(flex_refusal_rate=1.0)) as sim:
        agent = raygent.agent(model=model(sim))
        result = await raygent.batch(agent, ITEMS, service_tier=tier, progress=False)
        assert sorted(asked(sim)) == sorted(["flex", "default"] * len(ITEMS))
    assert result.report.tier_fallbacks == len(ITEMS)
    assert result.report.tiers == {"default": len(ITEMS)}
    assert result.usage.requests == 2 * len(ITEMS)


async def test_an_estimate_at_flex_prices_the_job_at_flex(backend_kind: str) -> None:
    with serve(rules()) as sim:
        agent = raygent.agent(model=model(sim))
        online = await raygent.estimate(agent, ITEMS, sample=len(ITEMS))
        flex = await raygent.estimate(agent, ITEMS, sample=len(ITEMS), service_tier="flex")
        job = await raygent.batch(agent, ITEMS, service_tier="flex", progress=False)
    assert online.cost_usd is not None and flex.cost_usd is not None
    assert flex.cost_usd == pytest.approx(online.cost_usd * 0.5)
    assert flex.cost_usd == pytest.approx(_total(job))  # the whole job as the sample


async def test_a_tier_and_a_provider_batch_are_refused_together() -> None:
    with serve(rules()) as sim:
        agent = raygent.agent(model=model(sim))
        with pytest.raises(ValueError, match="two prices"):
            await raygent.batch(agent, ITEMS, service_tier="flex", provider_batch=True)
        with pytest.raises(ValueError, match="two prices"):
            await raygent.estimate(agent, ITEMS, service_tier="flex", provider_batch=True)
        with pytest.raises(TypeError, match="service_tier="):
            await raygent.batch(agent, ITEMS, service_tier=3)  # type: ignore[arg-type]
        assert sim.stats().requests == 0

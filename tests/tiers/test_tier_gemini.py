"""Gemini's service tiers in agent runs, on both backends and both endpoints (issue
46.3): "flex", "standard" and "priority" sent, the tier served read back (the Gemini
API's header, Vertex AI's traffic type) and priced at its rates; priority's silent
downgrade priced as what was served; flex shed for capacity (503 UNAVAILABLE) sent again
at the fallback tier, and without a fallback the run's error, pausing nobody."""

from __future__ import annotations

import pytest
from tiers_support import ANSWER, asked, model, rules

import raygent
from raygent.sim import ServiceTiers, serve


@pytest.fixture(params=["gemini", "vertex"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _cost(result: raygent.AgentResult) -> float:
    assert result.ok, result.error
    cost = raygent.total_cost(result.usage)
    assert cost is not None
    return cost


async def test_each_gemini_tier_is_sent_read_back_and_priced(backend_kind: str, kind: str) -> None:
    with serve(rules()) as sim:
        agent = raygent.agent(model=model(sim, kind))
        costs: dict[str, float] = {}
        for tier in ("standard", "flex", "priority"):
            result = await agent.execute("hello", model_options={"service_tier": tier})
            costs[tier] = _cost(result)
            assert [trip.service_tier for trip in result.report.trips] == [tier]
        assert asked(sim) == ["standard", "flex", "priority"]
    assert costs["flex"] == pytest.approx(costs["standard"] * 0.5)
    assert costs["priority"] == pytest.approx(costs["standard"] * 2.0)


async def test_priority_downgraded_is_priced_as_standard(backend_kind: str, kind: str) -> None:
    with serve(rules(), tiers=ServiceTiers(priority_downgrade_rate=1.0)) as sim:
        agent = raygent.agent(model=model(sim, kind, service_tier="priority"))
        downgraded = await agent.execute("hello")
        standard = await agent.execute("hello", model_options={"service_tier": "standard"})
        assert asked(sim) == ["priority", "standard"]
    assert downgraded.report.trips[0].service_tier == "standard"
    assert _cost(downgraded) == pytest.approx(_cost(standard))


@pytest.mark.parametrize("streamed", [False, True])
async def test_flex_shed_for_capacity_falls_back_and_is_counted(
    backend_kind: str, kind: str, streamed: bool
) -> None:
    tier = raygent.Tier("flex", fallback="standard")
    with serve(rules(), tiers=ServiceTiers(flex_refusal_rate=1.0)) as sim:
        agent = raygent.agent(model=model(sim, kind, service_tier=tier))
        if streamed:
            stream = agent.stream("hello")
            async for _ in stream:
                pass
            result = await stream.result
        else:
            result = await agent.execute("hello")
        assert asked(sim) == ["flex", "standard"]
        plain = await agent.execute("hello", model_options={"service_tier": "standard"})
    trip = result.report.trips[0]
    assert trip.service_tier == "standard" and result.text == ANSWER
    [refusal] = trip.attempts
    assert refusal["service_tier"] == "flex" and refusal["fallback"] == "standard"
    assert refusal["error"]["status"] == 503 and refusal["error"]["capacity"] is True
    assert result.report.tier_fallbacks == 1 and plain.report.tier_fallbacks == 0
    assert result.usage.requests == 2  # the refusal is a request, billed at nothing
    assert _cost(result) == pytest.approx(_cost(plain))


async def test_a_bare_flex_refusal_fails_its_run_at_once_and_pauses_nobody(
    backend_kind: str, kind: str
) -> None:
    with serve(rules(), tiers=ServiceTiers(flex_refusal_rate=1.0)) as sim:
        agent = raygent.agent(model=model(sim, kind, service_tier="flex"))
        refused = await agent.execute("hello")
        assert asked(sim) == ["flex"]  # sent once, never again
        after = await agent.execute("hello", model_options={"service_tier": "standard"})
    assert refused.error is not None and refused.error.code == "PROVIDER_RATE_LIMITED"
    assert refused.error.details.get("capacity") is True
    assert after.ok and not after.report.trips[0].attempts  # nothing to wait out

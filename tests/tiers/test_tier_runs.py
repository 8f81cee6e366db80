"""Service tiers in agent runs, on both backends (issue 40.2-40.4): the tier asked for is
sent, the tier served is read back onto the trip and priced at its rates; a flex request
refused for capacity falls back and is counted; prompt-cache keys derived per session or
per agent; OpenAI's cached input tokens priced as cached."""

from __future__ import annotations

import pytest
from tiers_support import ANSWER, PRICING, asked, model, rules

import raygent
from raygent.sim import ServiceTiers, serve

OPENAI_KINDS = ["openai", "openai_responses"]


def _cost(result: raygent.AgentResult) -> float:
    assert result.ok, result.error
    cost = raygent.total_cost(result.usage)
    assert cost is not None
    return cost


@pytest.mark.parametrize("kind", OPENAI_KINDS)
async def test_each_openai_tier_is_sent_read_back_and_priced(backend_kind: str, kind: str) -> None:
    with serve(rules()) as sim:
        agent = raygent.agent(model=model(sim, kind))
        costs: dict[str, float] = {}
        for tier in ("default", "flex", "priority"):
            result = await agent.execute("hello", model_options={"service_tier": tier})
            costs[tier] = _cost(result)
            assert [trip.service_tier for trip in result.report.trips] == [tier]
            shown = f"tier={tier}" in repr(result.report.trips[0])
            assert shown == (tier != "default")  # the standard tier goes unsaid
        auto = await agent.execute("hello", model_options={"service_tier": "auto"})
        assert asked(sim) == ["default", "flex", "priority", "auto"]
    assert auto.report.trips[0].service_tier == "default"  # what "auto" was served at
    assert costs["flex"] == pytest.approx(costs["default"] * 0.5)
    assert costs["priority"] == pytest.approx(costs["default"] * 2.0)
    assert _cost(auto) == pytest.approx(costs["default"])


async def test_anthropic_tiers_are_read_from_usage_and_priced(backend_kind: str) -> None:
    with serve(rules(), tiers=ServiceTiers(anthropic_priority=True)) as sim:
        agent = raygent.agent(model=model(sim, "anthropic", service_tier="auto"))
        priority = await agent.execute("hello")
        standard = await agent.execute("hello", model_options={"service_tier": "standard_only"})
        assert asked(sim) == ["auto", "standard_only"]
    assert priority.report.trips[0].service_tier == "priority"
    assert standard.report.trips[0].service_tier == "standard"
    assert _cost(priority) == pytest.approx(_cost(standard) * 2.0)


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("kind", OPENAI_KINDS)
async def test_a_flex_request_refused_for_capacity_falls_back_and_is_counted(
    backend_kind: str, kind: str, streamed: bool
) -> None:
    tier = raygent.Tier("flex", fallback="default")
    with serve(rules(), tiers=ServiceTiers(flex_refusal_rate=1.0)) as sim:
        agent = raygent.agent(model=model(sim, kind, service_tier=tier))
        if streamed:
            stream = agent.stream("hello")
            async for _ in stream:
                pass
            result = await stream.result
        else:
            result = await agent.execute("hello")
        assert asked(sim) == ["flex", "default"]
        plain = await agent.execute("hello", model_options={"service_tier": "default"})
    trip = result.report.trips[0]
    assert trip.service_tier == "default" and result.text == ANSWER
    [refusal] = trip.attempts
    assert refusal["service_tier"] == "flex" and refusal["fallback"] == "default"
    assert refusal["error"]["provider_code"] == "resource_unavailable"
    assert result.report.tier_fallbacks == 1 and plain.report.tier_fallbacks == 0
    assert result.usage.requests == 2  # the refusal is a request, billed at nothing
    assert _cost(result) == pytest.approx(_cost(plain))


async def test_a_tier_given_per_call_wins_over_the_agents_and_the_models(
    backend_kind: str,
) -> None:
    with serve(rules()) as sim:
        agent = raygent.agent(
            model=model(sim, service_tier="priority"), model_options={"service_tier": "flex"}
        )
        await agent.execute("hello")
        await agent.execute("hello", model_options={"service_tier": "default"})
        bare = raygent.agent(model=model(sim, service_tier="priority"))
        await bare.execute("hello")
        assert asked(sim) == ["flex", "default", "priority"]


@pytest.mark.parametrize("kind", OPENAI_KINDS)
async def test_prompt_cache_keys_derived_per_session_and_per_agent(
    backend_kind: str, kind: str
) -> None:
    with serve(rules()) as sim:
        by_session = raygent.agent("triage", model=model(sim, kind, prompt_cache_key="session"))
        for session in ("alice", "alice", "bob", None):
            result = await by_session.execute("hello", session_id=session)
            assert result.ok, result.error
        by_agent = raygent.agent("triage", model=model(sim, kind, prompt_cache_key="agent"))
        await by_agent.execute("hello", session_id="alice")
        await by_agent.execute("hello", session_id="bob")
        given = raygent.agent(model=model(sim, kind, prompt_cache_retention="24h"))
        await given.execute("hello", model_options={"prompt_cache_key": "mine"})
        keys = asked(sim, "prompt_cache_key")
        assert asked(sim, "prompt_cache_retention")[-1] == "24h"
    alice, alice_again, bob, no_session, agent_a, agent_b, mine = keys
    assert alice == alice_again != bob  # one key per session
    assert no_session == agent_a == agent_b  # a run on no session: its agent's key
    assert len({alice, bob, agent_a}) == 3
    assert "alice" not in alice and alice.startswith("raygent-")  # hashed
    assert mine == "mine"


@pytest.mark.parametrize("kind", OPENAI_KINDS)
async def test_openai_cached_input_tokens_are_priced_as_cached(
    backend_kind: str, kind: str
) -> None:
    long_prompt = "You answer questions about the weather. " * 300  # past 1,024 tokens
    with serve(rules()) as sim:
        agent = raygent.agent(model=model(sim, kind), system_prompt=long_prompt)
        await agent.execute("first question")
        second = await agent.execute("second question", model_options={"service_tier": "flex"})
    usage = second.usage
    assert usage.cached_tokens > 1000 and usage.cost is not None
    # Cached tokens at the cached rate, the rest at the input rate; both at flex (half).
    cached_rate = (PRICING.cached_input_per_mtok or 0) * 0.5
    assert usage.cost.cached_input == pytest.approx(usage.cached_tokens * cached_rate / 1e6)
    fresh = usage.input_tokens - usage.cached_tokens
    assert usage.cost.input == pytest.approx(fresh * PRICING.input_per_mtok * 0.5 / 1e6)


async def test_a_budget_reserves_a_priority_request_at_the_priority_rates(
    backend_kind: str,
) -> None:
    from raygent.budgets.budget import worst_case

    with serve(rules()) as sim:
        priced = model(sim)
        asks = [raygent.UserMessage(content="hello")]
        usd = worst_case(priced, asks, raygent.ModelOptions(max_tokens=50))[0][0]
        # Room for a request's worst case at the standard rates, not at priority's (2x).
        budget = raygent.Budget(usd=usd * 1.5)
        agent = raygent.agent(model=priced, model_options={"max_tokens": 50}, budget=budget)
        standard = await agent.execute("hello")
        priority = await agent.execute("hello", model_options={"service_tier": "priority"})
        assert asked(sim) == [None]  # the priority request was never sent
    assert standard.ok, standard.error
    assert priority.error is not None and priority.error.code == "BUDGET_EXCEEDED"


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_bare_flex_refusal_fails_its_run_at_once_and_pauses_nobody(
    backend_kind: str, streamed: bool
) -> None:
    # No fallback: the refusal is the run's error. It says nothing of the key's rate, so
    # it is not retried as a 429 (on Ray the gateway would pause every holder for it).
    with serve(rules(), tiers=ServiceTiers(flex_refusal_rate=1.0)) as sim:
        agent = raygent.agent(model=model(sim, service_tier="flex"))
        if streamed:
            stream = agent.stream("hello")
            async for _ in stream:
                pass
            refused = await stream.result
        else:
            refused = await agent.execute("hello")
        assert asked(sim) == ["flex"]  # sent once, never again
        after = await agent.execute("hello", model_options={"service_tier": "default"})
        assert asked(sim) == ["flex", "default"]
    assert refused.error is not None and refused.error.code == "PROVIDER_RATE_LIMITED"
    assert refused.error.details.get("provider_code") == "resource_unavailable"
    assert after.ok and after.report.trips[0].rate_wait < 0.5  # nobody paused (1 s asked)

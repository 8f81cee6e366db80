"""A run's budget (`budget=` on a call, on an agent), on both backends, through the
simulator over real HTTP: a request whose worst case does not fit is not sent, and the
run ends failed with BUDGET_EXCEEDED."""

from __future__ import annotations

import pytest
from spend_support import ANSWER, MAX_TOKENS, priced_model, uniform_rules

import raygent
from raygent import Budget, OpenAIModel
from raygent.sim import Match, Reply, Rule, ToolCallReply, serve


@raygent.tool
def lookup(q: str) -> str:
    """Look a question up."""
    return f"found {q}"


def _looping_rules() -> list[Rule]:
    # The model calls the tool on every trip: only the budget (or max_trips) ends it.
    return [Rule(match=Match(), reply=Reply(tool_calls=[ToolCallReply("lookup", {"q": "x"})]))]


async def test_a_request_that_does_not_fit_is_not_sent(backend_kind: str) -> None:
    with serve(uniform_rules()) as sim:
        agent = raygent.agent(model=priced_model(sim), model_options={"max_tokens": MAX_TOKENS})
        result = await agent.execute("hello", budget=Budget(usd=0.01))  # one needs ~$0.13
        assert result.status == "failed"
        assert result.error is not None and result.error.code == "BUDGET_EXCEEDED"
        assert result.error.retryable is False and result.error.budget == "run"
        assert sim.stats().requests == 0
        ok = await agent.execute("hello", budget=Budget(usd=1.0))
        assert ok.status == "completed" and ok.text == ANSWER


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_run_ends_failed_at_the_trip_its_budget_cannot_hold(
    backend_kind: str, streaming: bool
) -> None:
    with serve(_looping_rules()) as sim:
        agent = raygent.agent(
            model=priced_model(sim), tools=[lookup], max_trips=50, model_options={"max_tokens": 10}
        )
        budget = Budget(requests=3, usd=5.0)
        if streaming:
            stream = agent.stream("go", budget=budget)
            async for _ in stream:
                pass
            result = await stream.result
        else:
            result = await agent.execute("go", budget=budget)
        assert result.status == "failed" and result.error is not None
        assert result.error.code == "BUDGET_EXCEEDED" and result.error.dimension == "requests"
        assert sim.stats().requests == 3 and result.usage.requests == 3
        assert len(result.report.trips) == 4  # the fourth was refused before it was sent


async def test_an_agents_budget_holds_each_of_its_runs(backend_kind: str) -> None:
    with serve(_looping_rules()) as sim:
        agent = raygent.agent(
            model=priced_model(sim),
            tools=[lookup],
            max_trips=50,
            model_options={"max_tokens": 10},
            budget=Budget(requests=2),
        )
        first = await agent.execute("go")
        second = await agent.execute("go")
        # Each run has the agent's whole budget; a call's own budget holds as well.
        third = await agent.execute("go", budget=Budget(requests=1))
        assert [r.usage.requests for r in (first, second, third)] == [2, 2, 1]
        assert all(
            r.error is not None and r.error.code == "BUDGET_EXCEEDED" for r in (first, third)
        )
        assert sim.stats().requests == 5


async def test_a_dollar_budget_needs_pricing_or_a_token_budget_too(backend_kind: str) -> None:
    with serve(uniform_rules()) as sim:
        unpriced = OpenAIModel("sim-unpriced", base_url=sim.openai_base_url, api_key="sk-t")
        agent = raygent.agent(model=unpriced, model_options={"max_tokens": MAX_TOKENS})
        result = await agent.execute("hello", budget=Budget(usd=100.0))
        assert result.status == "failed" and result.error is not None
        assert result.error.code == "INVALID_OPTIONS" and "pricing" in result.error.message
        assert sim.stats().requests == 0  # it cannot be held: nothing is sent
        held = await agent.execute("hello", budget=Budget(usd=100.0, tokens=10_000))
        assert held.status == "completed"
        with pytest.raises(ValueError, match="pricing"):
            await raygent.batch(agent, ["a"], budget=Budget(usd=1.0), progress=False)


async def test_each_attempt_of_a_fallback_is_held_at_its_own_models_prices(
    backend_kind: str,
) -> None:
    from raygent.sim import Fault

    rules = [
        Rule(match=Match(model="^down$"), reply=Reply(fault=Fault(kind="status", status=500))),
        Rule(reply=Reply(text=ANSWER)),
    ]
    with serve(rules) as sim:
        cheap = priced_model(sim, pricing=raygent.Pricing(input_per_mtok=1, output_per_mtok=1))
        down = OpenAIModel(
            "down", base_url=sim.openai_base_url, api_key="sk-t", pricing=cheap.pricing
        )
        dear = OpenAIModel(
            "dear",
            base_url=sim.openai_base_url,
            api_key="sk-t",
            pricing=raygent.Pricing(input_per_mtok=1e6, output_per_mtok=1e6),
        )
        options = {"max_tokens": MAX_TOKENS}
        first = raygent.agent(model=raygent.fallback_model([down, cheap]), model_options=options)
        # The failed attempt (an error reply) is not billed; the cheap model's fits.
        ok = await first.execute("hello", budget=Budget(usd=0.01))
        assert ok.status == "completed" and ok.usage.requests == 2
        second = raygent.agent(model=raygent.fallback_model([down, dear]), model_options=options)
        refused = await second.execute("hello", budget=Budget(usd=0.01))
        # The dear model's worst case does not fit: it is not sent.
        assert refused.error is not None and refused.error.code == "BUDGET_EXCEEDED"
        assert sim.stats().requests == 3  # down, cheap; then down only


async def test_a_job_budget_needs_an_agent() -> None:
    async def plain(item: str) -> str:
        return item

    with pytest.raises(TypeError, match="needs an agent"):
        await raygent.batch(plain, ["a"], budget=Budget(usd=1.0), progress=False)


async def test_an_agent_run_as_a_tool_is_held_to_its_parents_budget(backend_kind: str) -> None:
    rules = [
        Rule(match=Match(system="helper"), reply=Reply(text="helped")),
        Rule(
            match=Match(after_tool_result=False),
            reply=Reply(tool_calls=[ToolCallReply("helper", {"input": "x"})]),
        ),
        Rule(match=Match(after_tool_result=True), reply=Reply(text="done")),
    ]
    with serve(rules) as sim:
        model = OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-test")
        helper = raygent.agent(model=model, name="helper", system_prompt="You are a helper.")
        parent = raygent.agent(model=model, tools=[helper.as_tool()])
        # The parent's first trip and the helper's request take both: the parent's
        # second trip is not sent.
        result = await parent.execute("go", budget=Budget(requests=2))
        assert result.status == "failed"
        assert result.error is not None and result.error.code == "BUDGET_EXCEEDED"
        assert sim.stats().requests == 2
        ok = await parent.execute("go", budget=Budget(requests=3))
        assert ok.status == "completed" and ok.text == "done"
        assert sim.stats().requests == 5

"""The new wires (Gemini, Bedrock's Converse) on the simulator, for the tests of rate
limits and budgets in this process (tests/rates) and on Ray (tests/ray): a model of
each, uniform items, and what the simulator and the runs' reports say of throttling."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

import raygent
from raygent import BedrockModel, Budget, GeminiModel, Pricing
from raygent._batch import BatchItem, BatchResult
from raygent.sim import Reply, Rule, SimStats, Simulator
from raygent.sim._bedrock_auth import TEST_CREDENTIALS

WIRES = ("gemini", "bedrock")
GEMINI = "gemini-2.5-flash"
BEDROCK = "us.anthropic.claude-haiku-4-5-20251001-v1:0"  # a cross-region inference profile
KEY = "gemini-sim-key"
# Declared prices (USD per million tokens): big, so that a few requests cost cents.
PRICING = Pricing(input_per_mtok=1000.0, output_per_mtok=3000.0)
ANSWER = "a" * 80  # the same answer to every question
MAX_TOKENS = 40
# Each wire's own throttling error, as the provider names it.
THROTTLING = {"gemini": "RESOURCE_EXHAUSTED", "bedrock": "ThrottlingException"}


def wire_model(wire: str, sim: Simulator, **kwargs: Any) -> GeminiModel | BedrockModel:
    """`wire`'s model on the simulator, at the declared prices (unless given)."""
    kwargs.setdefault("pricing", PRICING)
    if wire == "gemini":
        return GeminiModel(GEMINI, base_url=sim.gemini_base_url, api_key=KEY, **kwargs)
    return BedrockModel(
        BEDROCK,
        region="us-east-1",
        base_url=sim.url,
        access_key=TEST_CREDENTIALS.access_key,
        secret_key=TEST_CREDENTIALS.secret_key,
        **kwargs,
    )


def uniform_rules() -> list[Rule]:
    return [Rule(reply=Reply(text=ANSWER))]


def questions(count: int) -> list[dict[str, Any]]:
    """Items of one size (a fixed-width question): every request costs the same."""
    return [{"input": f"question number {i:05d}", "key": f"k{i:05d}"} for i in range(count)]


async def per_request(agent: raygent.Agent) -> float:
    """What one item (one request: every item is the same size) costs, as the wire's
    usage is priced."""
    probe = await agent.execute(questions(1)[0]["input"])
    assert probe.ok, probe.error
    assert probe.usage.requests == 1 and probe.usage.input_tokens > 0
    assert probe.usage.output_tokens > 0 and probe.usage.cost is not None
    return probe.usage.cost.total


def throttled(stats: SimStats) -> int:
    """The 429s the simulator sent for a rate (not for its concurrency cap)."""
    return sum(n for cause, n in stats.rate_limited.items() if cause != "concurrency")


def answered(stats: SimStats) -> int:
    return stats.by_status.get(200, 0)


def throttled_sends(
    items: Iterable[BatchItem], runs: Iterable[raygent.AgentResult] = ()
) -> list[dict[str, Any]]:
    """Every send a 429 answered, from the runs' reports (a request's failed sends are
    listed on its trip's attempts)."""
    reports = [item.result.report for item in items if item.result is not None]
    reports += [run.report for run in runs]
    return [
        attempt
        for report in reports
        for trip in report.trips
        for attempt in trip.attempts
        if attempt.get("status") == 429
    ]


def check_budget(
    result: BatchResult, budget: Budget, per_item: float, spent: float, *, in_flight: int
) -> None:
    """A job stopped at its budget: every item once, those not done ended
    BUDGET_EXCEEDED (not retryable; the unstarted ones sent nothing); what the provider
    was paid (`spent`: every answer at `per_item`) within the budget and what
    `in_flight` requests had reserved, and past half of it (the budget bound); the
    report's spend the wire's usage priced."""
    report = result.report
    items = result.items
    assert report.total == len(items) and len({i.key for i in items}) == len(items)
    assert report.failed > 0 and report.errors == {"BUDGET_EXCEEDED": report.failed}
    refused = [i.error for i in items if i.error is not None]
    assert all(e.retryable is False for e in refused)
    needed = max(e.details.get("needed", 0.0) for e in refused if e.details.get("dimension"))
    assert needed >= per_item  # a request reserves its whole output cap
    assert all(
        i.usage.requests == 0 for i in items if i.error and i.error.details.get("started") is False
    )
    assert budget.usd is not None
    assert budget.usd / 2 <= spent <= budget.usd + in_flight * needed, (spent, budget)
    shown = report.budget
    assert shown is not None and shown.limit == budget
    assert result.usage.cost is not None
    # Priced from the wire's usage: the report's spend is what the answers cost.
    assert shown.spent.usd == pytest.approx(result.usage.cost.total) == pytest.approx(spent)
    assert shown.spent.requests == result.usage.requests == report.succeeded
    assert shown.spent.input_tokens > 0 and shown.spent.output_tokens > 0

"""Shared helpers for the flow tests: simulator-backed agents, event and observer
recorders, a sleep recorder for `Retry(sleep=...)`."""

from __future__ import annotations

from typing import Any

import pytest

import raygent
from raygent import AnthropicModel, OpenAIModel, Pricing
from raygent.models._http import HTTPModel
from raygent.observers.events import Event
from raygent.observers.report import FlowReport
from raygent.sim import Simulator

KEY = "sk-test-key-000000"
PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=2.0)


def make_model(sim: Simulator, provider: str = "openai", **kwargs: Any) -> HTTPModel:
    """A model on the simulator (priced, so that usage carries a cost)."""
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("pricing", PRICING)
    if provider == "openai":
        return OpenAIModel("sim-gpt", base_url=sim.openai_base_url, **kwargs)
    return AnthropicModel("sim-claude", base_url=sim.anthropic_base_url, **kwargs)


def sim_agent(sim: Simulator, name: str, **kwargs: Any) -> raygent.Agent:
    """An agent on the simulator whose system prompt starts with its name, so that a
    script's rules can answer each agent apart (`Match(system="^name")`)."""
    kwargs.setdefault("system_prompt", f"{name}: do your part.")
    return raygent.agent(model=make_model(sim), name=name, **kwargs)


class Recorder:
    """An event handler keeping every event it sees."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    @property
    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]


class Sleeps:
    """`Retry(sleep=Sleeps())`: records each backoff instead of waiting it."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


class Observed:
    """An observer keeping the report trees it is given."""

    def __init__(self) -> None:
        self.reports: list[Any] = []

    def __call__(self, report: Any) -> None:
        self.reports.append(report)

    @property
    def flows(self) -> list[FlowReport]:
        return [r for r in self.reports if isinstance(r, FlowReport)]


def step_statuses(result: raygent.FlowResult) -> list[tuple[str, str]]:
    """(name, status) of every step the run entered, in order."""
    return [(s.name, s.status) for s in result.report.steps]


def assert_usage_equal(actual: raygent.Usage, expected: raygent.Usage) -> None:
    """The same tokens exactly, the same cost up to the order its floats were added."""
    assert actual.model_copy(update={"cost": None}) == expected.model_copy(update={"cost": None})
    assert (actual.cost is None) == (expected.cost is None)
    if actual.cost is not None and expected.cost is not None:
        assert actual.cost.model_dump() == pytest.approx(expected.cost.model_dump())

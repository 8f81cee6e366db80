"""Helpers for the observer and view tests: a recording observer and a nested run."""

from __future__ import annotations

import raygent
from raygent import AgentReport, Pricing
from raygent.testing import ScriptedModel, call, reply

PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=2.0)


class Kept:
    """A sync observer that keeps every report it gets."""

    def __init__(self) -> None:
        self.reports: list[AgentReport] = []

    def __call__(self, report: AgentReport) -> None:
        self.reports.append(report)


@raygent.tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


def nested_agents(**outer_options: object) -> raygent.Agent:
    """An outer agent that calls `lookup`, then an inner agent (itself calling
    `lookup`), then answers: three runs' worth of trips in one tree."""
    inner = raygent.agent(
        "researcher",
        model=ScriptedModel(
            [reply(tool_calls=[call("lookup", {"topic": "owls"})]), "Owls hunt at night."],
            pricing=PRICING,
        ),
        tools=[lookup],
    )
    outer_model = ScriptedModel(
        [
            reply(
                tool_calls=[
                    call("lookup", {"topic": "birds"}),
                    call("researcher", {"input": "owls?"}),
                ]
            ),
            "Birds, and owls hunt at night.",
        ],
        pricing=PRICING,
    )
    return raygent.agent(
        "editor",
        model=outer_model,
        tools=[lookup, inner],
        **outer_options,  # type: ignore[arg-type]
    )

"""Fan-out: intents run concurrently (the simulator's peak in flight), bounded by
`max_fan_out`; `raygent.fan_out` and `raygent.vote` for self-consistency."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pydantic import BaseModel
from supervisor_support import sim_model

import raygent
from raygent import END, Vote
from raygent.errors import RoutingError
from raygent.flows import SupervisorState, Tally
from raygent.sim import Latency, Match, Reply, Rule, serve
from raygent.testing import mock_router

LATENCY_S = 0.4


@pytest.mark.parametrize(("width", "max_fan_out"), [(4, 4), (3, 8)])
async def test_a_fan_out_runs_its_intents_concurrently(width: int, max_fan_out: int) -> None:
    async with serve(latency=Latency(fixed_ms=LATENCY_S * 1000)) as sim:
        voter = raygent.agent(name="voter", model=sim_model("openai", sim))
        voters = raygent.fan_out(voter, 8)
        chosen = list(voters)[:width]
        panel = raygent.supervisor(
            name="panel", intents=voters, route=mock_router([chosen]), max_fan_out=max_fan_out
        )
        # One run first: on Ray the first request of a process sets up its lease on the
        # model gateway, which is not what is timed here.
        assert (await voter.execute("warm up")).ok
        sim.reset()
        started = time.perf_counter()
        result = await panel.execute("2+2?")
        elapsed = time.perf_counter() - started
        stats = sim.stats()

    assert result.ok, result.error
    assert sorted(result.data) == sorted(chosen)
    assert stats.requests == width
    assert stats.peak_in_flight == width  # all at once, none more
    # About the slowest branch, not the sum of them (generous margin).
    assert elapsed < 0.75 * width * LATENCY_S


async def test_a_fan_out_over_max_fan_out_sends_nothing() -> None:
    async with serve() as sim:
        voters = raygent.fan_out(raygent.agent(name="voter", model=sim_model("openai", sim)), 5)
        panel = raygent.supervisor(
            name="panel", intents=voters, route=lambda s: list(voters), max_fan_out=4
        )
        result = await panel.execute("x")
        requests = sim.stats().requests

    assert isinstance(result.error, RoutingError)
    assert "over max_fan_out=4" in result.error.message
    assert requests == 0


def voting_script(*answers: str) -> list[Rule]:
    return [Rule(match=Match(last_user="capital"), reply=[Reply(text=a) for a in answers])]


async def test_vote_as_evaluate_ends_on_a_majority() -> None:
    async with serve(voting_script("Paris", "Lyon", "Paris")) as sim:
        voters = raygent.fan_out(raygent.agent(name="voter", model=sim_model("openai", sim)), 3)
        panel = raygent.supervisor(
            name="panel",
            intents=voters,
            route=lambda state: list(voters),
            evaluate=raygent.vote,  # the ready evaluate: vote.evaluate
        )
        result = await panel.execute("The capital of France?")

    assert result.ok, result.error
    assert sorted(result.data.values()) == ["Lyon", "Paris", "Paris"]
    counted = raygent.vote(result.data)
    assert counted.winner == "Paris" and not counted.tie
    assert counted.votes == 2 and counted.total == 3 and counted.majority
    assert len({s.iteration for s in result.report.steps if s.kind == "intent"}) == 1


async def test_vote_as_evaluate_routes_again_after_a_tie() -> None:
    # Two voters: the first iteration answers Paris and Lyon (a tie), the second Paris twice.
    async with serve(voting_script("Paris", "Lyon", "Paris", "Paris")) as sim:
        voters = raygent.fan_out(raygent.agent(name="voter", model=sim_model("openai", sim)), 2)
        ties: list[list[Any]] = []

        def evaluate(state: SupervisorState, outputs: dict[str, Any]) -> Any:
            ties.append(raygent.vote(outputs).tied)
            return raygent.vote.evaluate(state, outputs)

        panel = raygent.supervisor(
            name="panel", intents=voters, route=lambda s: list(voters), evaluate=evaluate
        )
        result = await panel.execute("The capital of France?")

    assert result.ok, result.error
    assert [sorted(t) for t in ties] == [["Lyon", "Paris"], []]
    assert raygent.vote(result.data).winner == "Paris"
    assert [s.iteration for s in result.report.steps if s.kind == "route"] == [1, 2]


def test_fan_out_names_its_intents_after_the_executable() -> None:
    bot = raygent.agent(name="solver", model=raygent.testing.ScriptedModel([]))
    assert raygent.fan_out(bot, 3) == {"solver1": bot, "solver2": bot, "solver3": bot}
    assert list(raygent.fan_out(bot, 2, name="s")) == ["s1", "s2"]
    with pytest.raises(ValueError, match="n >= 1"):
        raygent.fan_out(bot, 0)
    with pytest.raises(TypeError, match="executable"):
        raygent.fan_out(print, 2)


def test_vote_counts_equal_outputs_and_reports_ties() -> None:
    counted = raygent.vote({"a": "x", "b": "y", "c": "x", "d": "z"})
    assert counted == Vote(
        winner="x",
        tie=False,
        tallies=(Tally("x", 2, ("a", "c")), Tally("y", 1, ("b",)), Tally("z", 1, ("d",))),
        total=4,
    )
    assert counted.votes == 2 and not counted.majority  # 2 of 4 is not more than half
    assert counted.tied == []

    tie = raygent.vote(["y", "x", "x", "y"])
    assert tie.tie and tie.winner is None
    assert tie.tied == ["y", "x"]  # first seen first
    assert tie.tallies[0].voters == ("1", "4")

    empty = raygent.vote({})
    assert empty.winner is None and not empty.tie and empty.total == 0 and empty.votes == 0


class Verdict(BaseModel):
    label: str


def test_vote_compares_by_equality_or_by_key() -> None:
    # Unhashable and model outputs are compared with ==.
    assert raygent.vote([{"n": 1}, {"n": 1}, {"n": 2}]).winner == {"n": 1}
    models = raygent.vote([Verdict(label="spam"), Verdict(label="ham"), Verdict(label="spam")])
    assert models.winner == Verdict(label="spam")
    by_key = raygent.vote([" Paris", "paris", "Lyon"], key=lambda s: s.strip().lower())
    assert by_key.winner == " Paris" and by_key.votes == 2


def test_vote_evaluators() -> None:
    state = SupervisorState(input="q", context={})
    assert raygent.vote.evaluate(state, {"a": 1, "b": 1, "c": 2}) is END
    assert raygent.vote.evaluate(state, {"a": 1, "b": 2}) is None
    strict = raygent.vote.evaluator(majority=True)
    assert strict(state, {"a": 1, "b": 2, "c": 3, "d": 1}) is None  # 2 of 4
    assert strict(state, {"a": 1, "b": 1, "c": 3}) is END
    folded = raygent.vote.evaluator(key=str.casefold)
    assert folded(state, {"a": "Yes", "b": "yes", "c": "no"}) is END
    assert repr(raygent.vote) == "raygent.vote"

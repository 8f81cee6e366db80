"""Building blocks of supervisors: `router` (the routing agent), `fan_out` (one
executable as n intents) and `vote` (majority over their outputs, a ready `evaluate`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from .._sync import run_sync
from ..agents import Agent, AgentStream, agent
from ..executable import executable_name
from ..models.contract import Model
from ..observers.report import AgentResult
from ._markers import END, _End
from ._supervisor_state import END_NAME, SupervisorState, as_text

__all__ = ["Router", "Tally", "Vote", "fan_out", "router", "vote"]

DEFAULT_INSTRUCTIONS = (
    "You are the router of a team of specialists. Read the request and what the "
    "specialists have done so far, then choose who acts next. Choose END once the request "
    "is fully handled, or when no specialist can do more for it."
)
MULTIPLE_INSTRUCTIONS = (
    "You are the router of a team of specialists. Read the request and what the "
    "specialists have done so far, then choose every specialist that should act next: "
    "they work at the same time, on the same request. Choose only END once the request "
    "is fully handled, or when no specialist can do more for it."
)
# How much of each earlier output the router is shown (a summary, not the transcript).
SUMMARY_CHARS = 1000


class Router:
    """The routing agent of a supervisor (build with `raygent.router`): an agent whose
    structured output names the next intent (`{"intent": ...}`, or with `multiple=True`
    `{"intents": [...]}`) from a JSON-schema enum of the intent names plus "END".

    It is an executable: `execute(input)` gives the agent's `AgentResult` (its `data` the
    decision). Given a `SupervisorState` (what a supervisor does), it is shown the input
    and a summary of what earlier iterations produced."""

    def __init__(
        self,
        *,
        model: Model,
        intents: Mapping[str, str] | Sequence[str],
        system_prompt: str | None,
        name: str | None,
        multiple: bool,
    ) -> None:
        described = dict(intents) if isinstance(intents, Mapping) else {n: "" for n in intents}
        if not described:
            raise ValueError("a router needs at least one intent")
        for intent, description in described.items():
            if not isinstance(intent, str) or not intent or intent == END_NAME:
                raise ValueError(f"not an intent name: {intent!r} (END is reserved)")
            if not isinstance(description, str):
                raise TypeError(f"intent {intent!r}: a description is a str")
        self.intents = described
        self.multiple = multiple
        self.decision_model = decision_model(list(described), multiple)
        default = MULTIPLE_INSTRUCTIONS if multiple else DEFAULT_INSTRUCTIONS
        instructions = system_prompt or default
        self.agent: Agent = agent(
            name=name or "router",
            model=model,
            system_prompt=f"{instructions}\n\n{self._menu()}",
            output=self.decision_model,
        )
        self.name = self.agent.name
        self.description = "Choose which specialist acts next."

    def __repr__(self) -> str:
        return f"Router(name={self.name!r}, intents={list(self.intents)})"

    async def execute(self, input: Any, **options: Any) -> AgentResult:
        """Ask the routing agent once; `result.data` is the decision (never raises)."""
        return await self.agent.execute(self.prompt(input), **options)

    def execute_sync(self, input: Any, **options: Any) -> AgentResult:
        return run_sync(lambda: self.execute(input, **options))

    def stream(self, input: Any, **options: Any) -> AgentStream:
        return self.agent.stream(self.prompt(input), **options)

    def prompt(self, input: Any) -> str:
        """What the routing agent is sent: the request, and for a supervisor's state the
        iterations so far (each intent's output, cut to a summary)."""
        if not isinstance(input, SupervisorState):
            return f"Request:\n{as_text(input)}"
        lines = [f"Request:\n{as_text(input.input)}", ""]
        if not input.history:
            lines.append("Nothing has been done yet.")
        for done in input.history:
            lines.append(f"Iteration {done.index}:")
            for intent in done.intents:
                if intent in done.errors:
                    lines.append(f"- {intent} failed: {_summary(str(done.errors[intent]))}")
                else:
                    lines.append(f"- {intent} answered: {_summary(done.outputs.get(intent))}")
        lines += ["", f"Choose for iteration {input.iteration}."]
        return "\n".join(lines)

    def decision(self, data: Any) -> str | list[str]:
        """The decision the agent's output holds: an intent's name (or "END"), or with
        `multiple=True` a list of them."""
        if self.multiple:
            return list(getattr(data, "intents", None) or [])
        return str(getattr(data, "intent", None))

    def _menu(self) -> str:
        lines = ["Intents:"]
        for intent, description in self.intents.items():
            lines.append(f"- {intent}: {description}" if description else f"- {intent}")
        lines.append(f"- {END_NAME}: stop; the request is handled.")
        return "\n".join(lines)


def decision_model(names: Sequence[str], multiple: bool) -> type[BaseModel]:
    """The router's output model: `intent` (or `intents`) a Literal of `names` + END,
    which pydantic's JSON schema writes as an enum."""
    choice: Any = Literal[tuple([*names, END_NAME])]
    if multiple:
        return create_model(
            "RouteDecision",
            intents=(
                list[choice],
                Field(min_length=1, description="The intents that act next, or only END."),
            ),
        )
    return create_model(
        "RouteDecision", intent=(choice, Field(description="The intent that acts next, or END."))
    )


def router(
    *,
    model: Model,
    intents: Mapping[str, str] | Sequence[str],
    system_prompt: str | None = None,
    name: str | None = None,
    multiple: bool = False,
) -> Router:
    """The routing agent for `raygent.supervisor(router=...)`.

    `intents`: `{name: description}` (what the router is told each one does), or just
    names. `system_prompt` replaces the default instructions (the list of intents is
    always appended). `multiple=True` lets it choose several intents at once (a fan-out:
    they run concurrently)."""
    return Router(
        model=model, intents=intents, system_prompt=system_prompt, name=name, multiple=multiple
    )


def fan_out(executable: Any, n: int, *, name: str | None = None) -> dict[str, Any]:
    """`n` intents running the same executable, `{"<name>1": executable, ...,
    "<name>n": executable}` (its name, else `name`), for voting / self-consistency."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"fan_out needs n >= 1, not {n!r}")
    if not callable(getattr(executable, "execute", None)):
        raise TypeError(f"fan_out takes an executable (with execute), not {executable!r}")
    base = name or executable_name(executable)
    return {f"{base}{i}": executable for i in range(1, n + 1)}


def _summary(value: Any) -> str:
    text = as_text(value)
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 3] + "..."


# -- voting ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tally:
    """One distinct output, how many voted for it and who (intent names)."""

    value: Any
    votes: int
    voters: tuple[str, ...]


@dataclass(frozen=True)
class Vote:
    """What `raygent.vote(outputs)` counted. `winner` is the output with the most votes,
    None when two or more share the top count (`tie`; `tied` lists them) or there were
    no votes. `tallies` are the distinct outputs, most votes first (then first seen)."""

    winner: Any
    tie: bool
    tallies: tuple[Tally, ...]
    total: int

    @property
    def votes(self) -> int:
        """The top count."""
        return self.tallies[0].votes if self.tallies else 0

    @property
    def tied(self) -> list[Any]:
        """The outputs sharing the top count when tied, else empty."""
        return [t.value for t in self.tallies if t.votes == self.votes] if self.tie else []

    @property
    def majority(self) -> bool:
        """Whether the winner has more than half of the votes."""
        return self.winner is not None and self.votes * 2 > self.total


class Voting:
    """`raygent.vote`: call it on outputs for a `Vote`. As a supervisor's `evaluate`
    (`evaluate=raygent.vote`, which is `vote.evaluate`) it ends the run once an
    iteration's outputs have a winner; `vote.evaluator(...)` builds one with options."""

    def __call__(
        self,
        outputs: Mapping[str, Any] | Sequence[Any],
        *,
        key: Callable[[Any], Any] | None = None,
    ) -> Vote:
        """Count equal outputs (`==`, or equal `key(output)`, e.g. `str.casefold`):
        `outputs` by voter name (what a supervisor's iteration produced), or a list."""
        named = (
            list(outputs.items())
            if isinstance(outputs, Mapping)
            else [(str(i), v) for i, v in enumerate(outputs, 1)]
        )
        groups: list[tuple[Any, Any, list[str]]] = []  # key, first value, voters
        for voter, value in named:
            measure = key(value) if key is not None else value
            for group in groups:
                if group[0] == measure:
                    group[2].append(voter)
                    break
            else:
                groups.append((measure, value, [voter]))
        tallies = tuple(
            sorted(
                (Tally(value, len(voters), tuple(voters)) for _, value, voters in groups),
                key=lambda t: -t.votes,  # stable: first seen first among equals
            )
        )
        tie = len(tallies) > 1 and tallies[0].votes == tallies[1].votes
        winner = None if tie or not tallies else tallies[0].value
        return Vote(winner=winner, tie=tie, tallies=tallies, total=len(named))

    def evaluate(self, state: SupervisorState, outputs: Mapping[str, Any]) -> _End | None:
        """A supervisor's `evaluate`: END once this iteration's outputs have a winner,
        else None (route again: e.g. re-run the voters after a tie)."""
        return END if self(outputs).winner is not None else None

    def evaluator(
        self, *, key: Callable[[Any], Any] | None = None, majority: bool = False
    ) -> Callable[[SupervisorState, Mapping[str, Any]], _End | None]:
        """An `evaluate` counting by `key`; `majority=True` ends only when the winner
        has more than half of the votes."""

        def evaluate(state: SupervisorState, outputs: Mapping[str, Any]) -> _End | None:
            counted = self(outputs, key=key)
            done = counted.majority if majority else counted.winner is not None
            return END if done else None

        return evaluate

    def __repr__(self) -> str:
        return "raygent.vote"


vote = Voting()

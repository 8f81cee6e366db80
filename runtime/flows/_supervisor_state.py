"""What a supervisor's `route` and `evaluate` see (`SupervisorState`), and how a routing
decision is read: one intent, several at once, or END."""

from __future__ import annotations

import inspect
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from ..errors import RoutingError
from ._markers import END, _End
from ._values import as_text

__all__ = ["Iteration", "SupervisorState", "as_text", "maybe_await", "read_decision"]

# What `route` (or a router agent) may answer for "stop": `raygent.END`, or its name (a
# router agent's enum has no object for it; no intent may be called "END").
END_NAME = "END"


@dataclass(frozen=True)
class Iteration:
    """One iteration that ran intents: its number (from 1), the intents routed to, in
    the order routed, what each produced, and the errors of those that failed (kept
    only when the supervisor's `on_failure` let the run go on)."""

    index: int
    intents: tuple[str, ...]
    outputs: dict[str, Any]
    errors: dict[str, BaseException] = field(default_factory=dict)


@dataclass
class SupervisorState:
    """What `route(state)` and `evaluate(state, outputs)` see.

    - `input`: the supervisor's input (validated by its `input=` model when declared);
    - `context`: the caller's `context=` dict (never stored);
    - `iteration`: the iteration being routed (for `route`) or just run (for
      `evaluate`), counted from 1;
    - `outputs`: the latest output of every intent that ran, by intent name (an
      intent's output is its result's `data` when it has one, else its `text`);
    - `history`: every iteration that ran intents, in order (`Iteration`);
    - `run_id`: the supervisor run's id.
    """

    input: Any
    context: dict[str, Any]
    run_id: str = ""
    iteration: int = 1
    outputs: dict[str, Any] = field(default_factory=dict)
    history: list[Iteration] = field(default_factory=list)

    @property
    def last(self) -> Iteration | None:
        """The iteration run last, None before the first."""
        return self.history[-1] if self.history else None


def read_decision(decision: Any, intents: Collection[str], max_fan_out: int) -> list[str] | _End:
    """A decision as the intents to run (in order), or END. RoutingError for an unknown
    intent, no decision, a repeated intent, END beside intents, or more than
    `max_fan_out` intents at once."""
    known = sorted(intents)
    if decision is END or decision == END_NAME:
        return END
    names: list[Any]
    if isinstance(decision, str):
        names = [decision]
    elif isinstance(decision, (list, tuple)):
        names = list(decision)
    else:
        raise RoutingError(
            f"a route returns an intent's name, a list of names or raygent.END, not {decision!r}",
            decision=_shown(decision),
            intents=known,
        )
    if not names:
        raise RoutingError("the route chose no intent", decision=[], intents=known)
    ends = [n for n in names if n is END or n == END_NAME]
    if ends:
        if len(ends) == len(names):
            return END
        raise RoutingError(
            "the route chose END together with intents",
            decision=[_shown(n) for n in names],
            intents=known,
        )
    unknown = [n for n in names if not isinstance(n, str) or n not in intents]
    if unknown:
        raise RoutingError(
            f"unknown intent(s) {[_shown(n) for n in unknown]}: the intents are {known}",
            decision=[_shown(n) for n in names],
            intents=known,
        )
    if len(set(names)) != len(names):
        raise RoutingError(
            f"the route chose an intent twice at once: {names} (several runs of one "
            "executable are `raygent.fan_out(executable, n)`)",
            decision=names,
            intents=known,
        )
    if len(names) > max_fan_out:
        raise RoutingError(
            f"the route chose {len(names)} intents at once, over max_fan_out={max_fan_out}",
            decision=names,
            intents=known,
            max_fan_out=max_fan_out,
        )
    return names


def _shown(value: Any) -> Any:
    if value is END:
        return END_NAME
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


async def maybe_await(value: Any) -> Any:
    """`value`, awaited when it is awaitable (`route` and `evaluate` may be async)."""
    return await value if inspect.isawaitable(value) else value

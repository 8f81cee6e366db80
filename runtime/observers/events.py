"""Typed run events and the handlers that subscribe to them.

Every event carries `run_id` and `root_run_id`; tool events carry `call_id`. Handlers
subscribe by event name (or "*") at three tiers fired in order: the factory's `on=`, the
agent instance's `agent.on(...)`, the call's `on=`. A handler that raises is isolated:
the error is logged and kept on the report, and the run goes on.

`execute()` and `stream()` fire the same lifecycle events. The deltas (`STREAM_ONLY`:
text, reasoning, tool arguments and mid-stream usage) fire on `stream()` alone, where
the provider streams them; `execute()` never builds them.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..redaction import logger as redacting_logger
from ..usage import Usage

if TYPE_CHECKING:
    from .report import AgentResult, FlowResult

__all__ = [
    "STREAM_ONLY",
    "AgentCompleted",
    "AgentErrored",
    "AgentStarting",
    "Event",
    "EventHandler",
    "FlowCompleted",
    "FlowErrored",
    "FlowStarting",
    "Handlers",
    "StepCompleted",
    "StepStarted",
    "ToolCalled",
    "ToolCalling",
    "ToolFailed",
    "ToolStreaming",
    "TripCompleted",
    "TripReasoning",
    "TripStarted",
    "TripStreaming",
    "TripUsage",
]

log = redacting_logger("raygent.events")


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of all events. `type` is the event's name, e.g. "agent.trip.started"."""

    type: ClassVar[str] = "event"
    run_id: str
    root_run_id: str
    at: float = field(default_factory=time.time)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentStarting(Event):
    type: ClassVar[str] = "agent.starting"
    name: str
    session_id: str | None = None
    parent_run_id: str | None = None
    tenant: str | None = None  # the name of the `raygent.Tenant` it runs for


@dataclass(frozen=True, slots=True, kw_only=True)
class TripStarted(Event):
    type: ClassVar[str] = "agent.trip.started"
    trip_index: int
    purpose: str = "answer"


@dataclass(frozen=True, slots=True, kw_only=True)
class TripStreaming(Event):
    type: ClassVar[str] = "agent.trip.streaming"
    trip_index: int
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TripReasoning(Event):
    type: ClassVar[str] = "agent.trip.reasoning"
    trip_index: int
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TripUsage(Event):
    type: ClassVar[str] = "agent.trip.usage"
    trip_index: int
    usage: Usage


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolStreaming(Event):
    type: ClassVar[str] = "agent.tool.streaming"
    trip_index: int
    call_id: str
    name: str
    arguments_delta: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TripCompleted(Event):
    """A trip's reply is in. `rate_wait`: the seconds its requests waited for a rate
    limit; `throttled`: the 429s they met (both 0 where no limit held them)."""

    type: ClassVar[str] = "agent.trip.completed"
    trip_index: int
    finish_reason: str
    text: str
    usage: Usage
    rate_wait: float = 0.0
    throttled: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCalling(Event):
    type: ClassVar[str] = "agent.tool.calling"
    trip_index: int
    call_id: str
    name: str
    arguments: dict[str, Any] | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCalled(Event):
    type: ClassVar[str] = "agent.tool.called"
    trip_index: int
    call_id: str
    name: str
    output: str
    duration: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolFailed(Event):
    type: ClassVar[str] = "agent.tool.failed"
    trip_index: int
    call_id: str
    name: str
    error: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentCompleted(Event):
    type: ClassVar[str] = "agent.completed"
    result: AgentResult


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentErrored(Event):
    type: ClassVar[str] = "agent.error"
    error: dict[str, Any]
    result: AgentResult


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowStarting(Event):
    """A workflow or supervisor run begins (`kind` says which)."""

    type: ClassVar[str] = "flow.starting"
    name: str
    kind: str
    parent_run_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StepStarted(Event):
    """A step (a supervisor's routing or intent) begins; `attempt` counts its retries."""

    type: ClassVar[str] = "flow.step.started"
    step: str
    kind: str
    attempt: int = 1
    iteration: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCompleted(Event):
    """A step ended: completed, failed, skipped or cancelled."""

    type: ClassVar[str] = "flow.step.completed"
    step: str
    status: str
    duration: float
    iteration: int | None = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowCompleted(Event):
    type: ClassVar[str] = "flow.completed"
    result: FlowResult


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowErrored(Event):
    type: ClassVar[str] = "flow.error"
    error: dict[str, Any]
    result: FlowResult


# What `stream()` adds on top of the lifecycle events.
STREAM_ONLY = frozenset(
    {TripStreaming.type, TripReasoning.type, TripUsage.type, ToolStreaming.type}
)

EventHandler = Callable[[Event], Awaitable[None] | None]
Handlers = Mapping[str, EventHandler | Iterable[EventHandler]]


def handler_list(handlers: Handlers | None) -> list[tuple[str, EventHandler]]:
    """Flatten an `on=` mapping into (event name, handler) pairs, in order."""
    out: list[tuple[str, EventHandler]] = []
    for name, value in (handlers or {}).items():
        if callable(value):
            out.append((name, value))
        else:
            out.extend((name, h) for h in value)
    return out


class Dispatcher:
    """Delivers one run's events to its handlers, tier by tier, isolating failures."""

    __slots__ = ("_handlers", "_names", "_sink", "handler_errors")

    def __init__(
        self,
        tiers: Iterable[list[tuple[str, EventHandler]]],
        sink: Callable[[Event], None] | None = None,
    ) -> None:
        self._handlers = [pair for tier in tiers for pair in tier]
        self._names = frozenset(name for name, _ in self._handlers)
        self._sink = sink
        self.handler_errors: list[dict[str, Any]] = []

    def wants(self, event_type: str) -> bool:
        """Whether anyone listens to `event_type` (an event is not even built when
        nobody does)."""
        return self._sink is not None or event_type in self._names or "*" in self._names

    async def emit(self, event: Event) -> None:
        if self._sink is not None:
            self._sink(event)
        for name, handler in self._handlers:
            if name != event.type and name != "*":
                continue
            try:
                outcome = handler(event)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception as exc:  # a handler must never break the run
                log.warning("event handler for %s raised %r", event.type, exc)
                self.handler_errors.append(
                    {"event": event.type, "handler": _name(handler), "error": repr(exc)}
                )


def _name(handler: Any) -> str:
    return str(getattr(handler, "__qualname__", None) or repr(handler))

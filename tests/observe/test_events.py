"""The event dispatcher: an event is built only when someone listens to it."""

from __future__ import annotations

from raygent.observers.events import STREAM_ONLY, Dispatcher, Event, TripStarted


def _handler(event: Event) -> None:
    """A handler that does nothing."""


def test_a_dispatcher_wants_only_the_events_someone_listens_to() -> None:
    named = Dispatcher([[("agent.completed", _handler)], [], [("agent.error", _handler)]])
    assert named.wants("agent.completed") and named.wants("agent.error")
    assert not named.wants(TripStarted.type)
    assert not any(named.wants(kind) for kind in STREAM_ONLY)
    assert Dispatcher([[("*", _handler)]]).wants("agent.trip.usage")
    assert not Dispatcher([]).wants("agent.starting")
    kept: list[Event] = []
    assert Dispatcher([], kept.append).wants("agent.trip.streaming")  # a stream takes all


def test_the_stream_only_events_are_the_four_deltas() -> None:
    assert {
        "agent.trip.streaming",
        "agent.trip.reasoning",
        "agent.trip.usage",
        "agent.tool.streaming",
    } == STREAM_ONLY

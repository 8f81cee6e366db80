"""Which observers see a run, and handing them its report (see `raygent.observers`)."""

from __future__ import annotations

import inspect
from collections.abc import Iterable

from ._registry import Observe, Observer, log, observing_all, registered
from .report import RunReport

__all__ = ["deliver", "observers_for", "own_observers", "uses_global"]


def own_observers(setting: Observe) -> tuple[Observer, ...]:
    """The observers an `observe=` value names itself (none for None, True or False)."""
    if setting is None or isinstance(setting, bool):
        return ()
    if callable(setting):
        return (setting,)
    listed = tuple(setting)
    for observer in listed:
        if not callable(observer):
            raise TypeError(f"an observer is a callable taking a run report, not {observer!r}")
    return listed


def uses_global(agent_setting: Observe, call_setting: Observe) -> bool:
    """Whether the process-wide observers see a run, by the call's `observe=`, else the
    agent's, else the `observe_all` switch."""
    for setting in (call_setting, agent_setting):
        if isinstance(setting, bool):
            return setting
    return observing_all()


def observers_for(agent_setting: Observe, call_setting: Observe) -> tuple[Observer, ...]:
    """The observers of one root run, from the agent's and the call's `observe=`."""
    if call_setting is False:
        return ()
    chosen: Iterable[Observer] = (
        *(registered() if uses_global(agent_setting, call_setting) else ()),
        *own_observers(agent_setting),
        *own_observers(call_setting),
    )
    unique: list[Observer] = []
    for observer in chosen:
        if not any(observer is seen for seen in unique):
            unique.append(observer)
    return tuple(unique)


async def deliver(report: RunReport, observers: tuple[Observer, ...]) -> None:
    """Hand the finished report to each observer in turn; one that raises is logged."""
    for observer in observers:
        try:
            outcome = observer(report)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception as exc:  # an observer must never break the run
            log.warning("observer %s raised %r", _name(observer), exc, exc_info=exc)


def _name(observer: Observer) -> str:
    return str(getattr(observer, "__qualname__", None) or type(observer).__qualname__)

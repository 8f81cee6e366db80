"""Observers: code that receives completed runs' report trees.

    def keep(report: raygent.AgentReport) -> None:
        Path(f"{report.run_id}.json").write_text(report.to_json())

    raygent.observers.add(keep)                   # registered for this process
    raygent.observers.observe_all(True)           # ... and sees every run
    await bot.execute("hi", observe=False)        # not this one
    await bot.execute("hi", observe=other)        # `keep` and `other`

An observer is a callable, sync or async, taking a run's report: an `AgentReport`, or
a `FlowReport` for a workflow or supervisor. It gets the root run's report once the run
has ended (completed, failed, cancelled or incomplete), after the run's last event; a
nested run (an agent or a flow used as a tool, a flow's step) is not delivered apart: its
report hangs under its parent's tool call (`ToolCallReport.child`) or step
(`StepReport.runs`) in the root's tree.
Async observers are awaited before `execute` returns, so keep them quick (or hand the
report to a queue). An observer that raises is logged on `raygent.observers` and the run
goes on. The observers registered, and the switch, when a run starts are what it uses.

Which runs the registered (process-wide) observers see:

- `observe_all(True)` (off until turned on): every run, unless it opts out;
- `observe=True` on an agent or a call: that run, even with observe-all off (True on a
  call also overrides an agent's `observe=False`);
- `observe=False`: on an agent, none of its runs (unless a call says True); on a call,
  that run sees no observers at all;
- `observe=` an observer or a list of them: run-local collectors, which see the run
  whatever the switch says, besides the registered ones when those see it too (each
  observer sees a report once, even when listed twice).

On Ray, a batch's runs on batch runners are delivered to the driver's registered
observers by the same rule, with the driver's switch (the runners' own registries are
empty); run-local observers given in `run_options` run where the run does.

`OpenTelemetry()` is an observer that turns report trees into spans (the `otel` extra).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING

from ..redaction import logger as redacting_logger
from .otel import OpenTelemetry

if TYPE_CHECKING:
    from .report import RunReport

__all__ = [
    "Observe",
    "ObserveAll",
    "Observer",
    "OpenTelemetry",
    "Registration",
    "add",
    "observe_all",
    "observing_all",
    "registered",
]

log = redacting_logger("raygent.observers")

# An observer takes the report of a root run: an AgentReport, or a FlowReport for a
# workflow or supervisor (its agents' reports under its steps).
Observer = Callable[["RunReport"], Awaitable[None] | None]
Observe = bool | Observer | Iterable[Observer] | None

# The one place process-wide observers live; `add` hands back their removal.
_registry: list[Observer] = []
# Whether they see every run (observe_all), not only the runs that ask (observe=True).
_everything: list[bool] = [False]


class Registration:
    """What `add` returns: call it (or leave its `with` block) to remove the observer."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer
        self._active = True

    def __call__(self) -> None:
        # Removes one entry, once: an observer added twice stays until both are removed.
        if not self._active:
            return
        self._active = False
        for index, entry in enumerate(_registry):
            if entry is self.observer:
                del _registry[index]
                break

    def __enter__(self) -> Registration:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self()


def add(observer: Observer) -> Registration:
    """Have `observer` receive every run's report tree in this process."""
    if not callable(observer):
        raise TypeError(f"an observer is a callable taking a run report, not {observer!r}")
    _registry.append(observer)
    return Registration(observer)


def registered() -> tuple[Observer, ...]:
    """The process-wide observers, in the order they were added."""
    return tuple(_registry)


class ObserveAll:
    """What `observe_all` returns: leaving its `with` block puts the switch back."""

    def __init__(self, previous: bool) -> None:
        self.previous = previous

    def __enter__(self) -> ObserveAll:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        _everything[0] = self.previous


def observe_all(on: bool = True) -> ObserveAll:
    """Have the registered observers see every run in this process (`on=False`: only the
    runs that ask with `observe=True`, the default)."""
    if not isinstance(on, bool):
        raise TypeError(f"observe_all takes True or False, not {on!r}")
    previous, _everything[0] = _everything[0], on
    return ObserveAll(previous)


def observing_all() -> bool:
    """Whether `observe_all` is on."""
    return _everything[0]

"""Observers: code that receives every completed run's report tree.

    def keep(report: raygent.AgentReport) -> None:
        Path(f"{report.run_id}.json").write_text(report.to_json())

    remove = raygent.observers.add(keep)          # every run in this process
    await bot.execute("hi", observe=False)        # not this one
    await bot.execute("hi", observe=other)        # `keep` and `other`
    remove()                                      # or: with raygent.observers.add(keep): ...

An observer is a callable, sync or async, taking an `AgentReport`. It gets the root
run's report once the run has ended (completed, failed, cancelled or incomplete), after
the run's last event; a nested run (an agent used as a tool) is not delivered apart: its
report hangs under its parent's tool call (`ToolCallReport.child`) in the root's tree.
Async observers are awaited before `execute` returns, so keep them quick (or hand the
report to a queue). An observer that raises is logged on `raygent.observers` and the run
goes on. Observers registered when a run starts are the ones that see it.

`observe=` on `raygent.agent(...)` and on each call:

- None (default) or True: the global observers (True on a call also overrides an
  agent's `observe=False`);
- False: on an agent, no global observers for its runs; on a call, no observers at all;
- an observer or a list of them: these as well as the others (each observer sees a
  report once, even when listed twice).

`OpenTelemetry()` is an observer that turns report trees into spans (the `otel` extra).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING

from ._otel import OpenTelemetry

if TYPE_CHECKING:
    from .report import AgentReport

__all__ = ["Observe", "Observer", "OpenTelemetry", "Registration", "add", "registered"]

log = logging.getLogger("raygent.observers")

Observer = Callable[["AgentReport"], Awaitable[None] | None]
Observe = bool | Observer | Iterable[Observer] | None

# The one place process-wide observers live; `add` hands back their removal.
_registry: list[Observer] = []


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
        raise TypeError(f"an observer is a callable taking an AgentReport, not {observer!r}")
    _registry.append(observer)
    return Registration(observer)


def registered() -> tuple[Observer, ...]:
    """The process-wide observers, in the order they were added."""
    return tuple(_registry)

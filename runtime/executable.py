"""`raygent.Executable`: what runs anywhere an agent does.

An executable has a `name`, `execute(input, **options)` that never raises (the error
comes back typed on the result, with `status`, `usage`, `report`, `data` and `text`),
`execute_sync` and `stream` (typed events, then `.result`). Agents, workflows and
supervisors are executables; so is anything else with those methods. An executable can
be given to `tools=[...]` (see `as_tool`), to `raygent.batch`, to `raygent.eval.run` and
to a workflow step or a supervisor's intents.

The options every executable takes, so a parent can run it as its child: `parent=`
(the parent's `RunInfo`: its run ids, session and deps), `scope=` (what the child
inherits: `raygent.seams.RunScope`, its job and the budgets it is held to; a batch
gives it to each attempt's run), `signal=` (an `AbortSignal`), `on=` (event handlers),
`deps=`, and `observe=`. One that names all it takes (`TakesRunOptions`) has any other
refused by `raygent.batch` before anything runs.
"""

from __future__ import annotations

import re
from typing import Any, Protocol, runtime_checkable

__all__ = ["Executable", "TakesRunOptions", "executable_name", "is_executable"]


@runtime_checkable
class Executable(Protocol):
    """Anything that runs like an agent (see the module's docstring)."""

    name: str

    async def execute(self, input: Any, **options: Any) -> Any: ...

    def execute_sync(self, input: Any, **options: Any) -> Any: ...

    def stream(self, input: Any, **options: Any) -> Any: ...


@runtime_checkable
class TakesRunOptions(Protocol):
    """An executable that names the run options it takes (an agent: its `RunOptions`'
    names): `raygent.batch` refuses any other in its `run_options=` before anything
    runs, naming the closest it takes."""

    run_option_names: frozenset[str]


def is_executable(value: Any) -> bool:
    """Whether `value` runs like an agent (a plain function or a Tool does not)."""
    return callable(getattr(value, "execute", None)) and isinstance(
        getattr(value, "name", None), str
    )


def executable_name(value: Any) -> str:
    """The executable's name, made fit for a tool or a step (letters, digits, _ and -)."""
    name = str(getattr(value, "name", None) or type(value).__name__)
    return re.sub(r"[^a-zA-Z0-9_-]", "_", name)[:64] or "executable"

"""What a run inherits from where it runs, and what a batch gives each attempt: typed
values handed over explicitly, never a context variable or a key hidden in the options.

`RunScope`: what a run is started with besides its options: the ledgers it is held to
(its batch job's budget, its parent run's budgets), its attempt's provider-batch lines,
the job and tenant it belongs to, and, for a batch attempt's root run, the failed
attempt it continues. `raygent.batch` gives it to each attempt's run (the `scope=` run
option); a run that runs another as a tool gives the child its `child()` scope. A run
reads it once, as it starts; its requests carry what they need of it in their
`RequestContext`.

`AttemptPlan`: what every attempt of a batch job gets besides the run options (the job's
ledger, how its items' runs are named, durable or on sessions): typed fields of the
job's plan, shipped with it to the Ray batch runners.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..abort import AbortSignal
from ..budgets import BudgetLedger
from ..run_context import RunInfo
from ..tools import ToolContext
from .provider_lines import TripLines
from .request import Tenant

__all__ = [
    "NO_SCOPE",
    "AttemptPlan",
    "DurableAttempts",
    "ItemNaming",
    "RunScope",
    "ScopedToolContext",
    "inherited",
    "started_by",
]


@dataclass(frozen=True, slots=True)
class RunScope:
    """ledgers: the budgets a run is held to besides its own (its job's, its parent
    run's), shared. lines: its provider-batch lines (None: its trips go online). job,
    tenant: what it belongs to. continues: the failed attempt's result (an `AgentResult`
    with a trail) that this retry continues: the same run id, after what it stored.
    recover: the item's run may have written to its session before (its runner died, or
    the job was resumed): the store says what, and the run goes on after it."""

    ledgers: tuple[BudgetLedger, ...] = ()
    lines: TripLines | None = None
    job: str | None = None
    tenant: Tenant | None = None
    continues: Any = None
    recover: bool = False

    @property
    def deadline(self) -> float | None:
        lines = self.lines
        return None if lines is None else lines.deadline

    def child(self, ledgers: tuple[BudgetLedger, ...]) -> RunScope:
        """The scope of a run started by a run held to `ledgers` (its tool, a flow's
        step): the same job, tenant and lines, held to those ledgers; not a retry."""
        return RunScope(ledgers, self.lines, self.job, self.tenant)

    def of_tenant(self, tenant: Tenant, ledger: BudgetLedger | None) -> RunScope:
        """This scope for a run of `tenant`, held to its budget's `ledger` too."""
        ledgers = self.ledgers
        if ledger is not None and all(ledger is not held for held in ledgers):
            ledgers = (*ledgers, ledger)
        return RunScope(ledgers, self.lines, self.job, tenant, self.continues, self.recover)

    def resumed(self) -> RunScope:
        """This scope for a resumed run (its id and what it stored come from the store)."""
        return RunScope(self.ledgers, self.lines, self.job, self.tenant)


NO_SCOPE = RunScope()


class ItemNaming(Protocol):
    """How a batch names its items' runs on sessions: one run per item, across attempts
    and processes."""

    def run_id(self, key: Any) -> str: ...

    def recovers(self, attempts: int) -> bool:
        """Whether the `attempts`-th attempt looks in its session for its run."""
        ...


class DurableAttempts(Protocol):
    """How a durable batch runs an item's attempt (a new run, or its stored run resumed)."""

    async def attempt(
        self, executable: Any, key: Any, input: Any, options: dict[str, Any], signal: AbortSignal
    ) -> Any: ...


@dataclass(frozen=True)
class AttemptPlan:
    """What each attempt of a batch job is given besides the run options."""

    job: str | None = None  # the job's name (its sink's, else one of its own)
    job_budget: BudgetLedger | None = None  # `raygent.batch(budget=)`: shared by its runs
    durable: DurableAttempts | None = None  # durable=: its items' runs by name
    items: ItemNaming | None = None  # else: its items' runs on sessions by name

    def scope(
        self, continues: Any = None, recover: bool = False, lines: TripLines | None = None
    ) -> RunScope:
        """An attempt's scope: its run continues `continues` (a failed attempt's run),
        `recover`s what its session holds, and sends its trips by `lines`."""
        ledgers = () if self.job_budget is None else (self.job_budget,)
        return RunScope(ledgers, lines, self.job, None, continues, recover)


def inherited(options: Mapping[str, Any]) -> RunScope:
    """The scope a run's options give it (none: a run on its own)."""
    scope = options.get("scope")
    return scope if isinstance(scope, RunScope) else NO_SCOPE


class ScopedToolContext(ToolContext):
    """A tool call's context with the scope a run it starts inherits (an agent or a flow
    run as a tool: `scope_of_tool`). The scope is no field of the context a tool sees,
    and it stays in the caller's process: a context shipped elsewhere (a tool placed on
    a Ray executor) goes as a plain `ToolContext`."""

    __slots__ = ("scope",)
    scope: RunScope

    def __init__(self, *args: Any, scope: RunScope = NO_SCOPE, **fields: Any) -> None:
        super().__init__(*args, **fields)
        object.__setattr__(self, "scope", scope)

    def __reduce__(self) -> tuple[Any, ...]:
        values = tuple(getattr(self, f.name) for f in dataclasses.fields(ToolContext))
        return (ToolContext, values)


def started_by(ctx: ToolContext) -> dict[str, Any]:
    """The options of a run a tool starts (an agent or a flow run as a tool): the calling
    run's ids, session and deps as its `parent`, its abort signal, and the scope the call
    hands on (held to the caller's budgets, in its job)."""
    parent = RunInfo(
        run_id=ctx.run_id,
        root_run_id=ctx.root_run_id,
        parent_run_id=None,
        session_id=ctx.session_id,
        agent_name="",
        deps=ctx.deps,
    )
    scope = ctx.scope if isinstance(ctx, ScopedToolContext) else None
    return {"parent": parent, "signal": ctx.signal, "scope": scope}

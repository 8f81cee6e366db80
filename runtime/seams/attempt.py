"""What a batch sets around one attempt of an item, for the run it makes: internal
state, never a user's run option.

`raygent.batch` sets `current_attempt` around each attempt (in the driver or in a Ray
runner); an agent's root run reads it once, as it starts, the way a trip reads
`provider_lines.current_lines`. A nested run (one with a `parent`) does not: it is part
of its parent's run, and a job's budget reaches it through its parent's ledgers.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ..budgets import BudgetLedger

__all__ = ["NO_ATTEMPT", "AttemptState", "attempt_of", "current_attempt"]


@dataclass(frozen=True, slots=True)
class AttemptState:
    """job_budget: the job's ledger (`raygent.batch(budget=)`), shared by its runs.
    continues: the failed attempt's result (an `AgentResult` with a trail) that this
    retry continues: the same run id, after what it stored.
    recover: the item's run may have written to its session before (its runner died, or
    the job was resumed): the store says what, and the run goes on after it."""

    job_budget: BudgetLedger | None = None
    continues: Any = None
    recover: bool = False


NO_ATTEMPT = AttemptState()
current_attempt: ContextVar[AttemptState] = ContextVar("raygent_attempt", default=NO_ATTEMPT)


def attempt_of(parent: object | None) -> AttemptState:
    """The attempt state of a run whose parent is `parent`: a root run's (`parent` None)
    is what the batch set; a nested run's is none (it is part of its parent's)."""
    return current_attempt.get() if parent is None else NO_ATTEMPT

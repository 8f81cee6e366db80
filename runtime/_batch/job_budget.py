"""A job's budget (`raygent.batch(..., budget=)`): the agents it holds (an agent's runs,
or every agent a flow runs: a flow hands its `job_budget=` to them) and its ledger, kept
by the executable's backend (Ray: its gateway)."""

from __future__ import annotations

import uuid
from typing import Any

from ..budgets import Budget, BudgetLedger, pricing_of
from ..seams.contract import Backend
from ..seams.registry import current_backend
from .exec import is_runnable

__all__ = ["job_ledger"]


def job_ledger(executable: Any, budget: Budget | None) -> BudgetLedger | None:
    """The job's budget, held by the executable's backend (Ray: its gateway); checked
    before anything runs."""
    if budget is None:
        return None
    agents = _held_agents(executable)
    if budget.usd is not None and not budget.counts_tokens:
        for agent in agents:
            model = agent.model
            for each in getattr(model, "models", None) or [model]:
                if pricing_of(each) is None:
                    raise ValueError(
                        f"a dollar budget cannot be held: the pricing of {each.provider} "
                        f"{each.name!r} is unknown; declare pricing=raygent.Pricing(...) on "
                        "the model, or give a token budget too"
                    )
    backend = getattr(executable, "backend", None)
    if not isinstance(backend, Backend):
        backend = current_backend()
    return backend.budgets.job(budget, uuid.uuid4().hex)


def _held_agents(executable: Any) -> list[Any]:
    """The agents a job's ledger holds: the agent itself, or every agent of a flow (a
    flow's runs pass its `job_budget=` to them); TypeError for what holds nothing."""
    if is_runnable(executable) and hasattr(executable, "budget"):
        return [executable]
    agents = getattr(executable, "agents", None)
    if is_runnable(executable) and callable(agents):
        return list(agents())
    # A plain callable's requests (or an unknown executable's) would run unheld.
    raise TypeError("budget= needs an agent or a flow (a plain callable's requests are not held)")

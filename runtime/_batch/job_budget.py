"""A job's budget (`raygent.batch(..., budget=)`): the agents it holds (an agent's runs,
or every agent a flow runs: a flow hands the attempt's job budget to them) and its
ledger, kept by the executable's backend (Ray: its gateway); and the agents and models a
job's requests go to (`agents_of`, `models_of`), which the estimate prices too."""

from __future__ import annotations

import uuid
from typing import Any

from ..budgets import Budget, BudgetLedger, pricing_of
from ..models.contract import parts_of
from ..seams.contract import Backend
from ..seams.registry import current_backend
from .exec import is_runnable

__all__ = ["agents_of", "job_ledger", "models_of"]


def job_ledger(executable: Any, budget: Budget | None) -> BudgetLedger | None:
    """The job's budget, held by the executable's backend (Ray: its gateway); checked
    before anything runs."""
    if budget is None:
        return None
    agents = _held_agents(executable)
    if budget.usd is not None and not budget.counts_tokens:
        for agent in agents:
            for each in models_of(agent):
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


def agents_of(executable: Any) -> list[Any]:
    """The agents whose models a job's requests go to: the agent itself, or every agent
    of a flow (`Flow.agents()`); none for a plain callable."""
    if hasattr(executable, "model"):
        return [executable]
    agents = getattr(executable, "agents", None)
    return list(agents()) if callable(agents) else []


def models_of(agent: Any) -> list[Any]:
    """An agent's models: its model, or each model of a fallback."""
    return list(parts_of(agent.model))


def _held_agents(executable: Any) -> list[Any]:
    """The agents a job's ledger holds (`agents_of`); TypeError for what holds nothing."""
    agents = agents_of(executable) if is_runnable(executable) else []
    if not agents:
        # A plain callable's requests (or an unknown executable's) would run unheld.
        raise TypeError(
            "budget= needs an agent or a flow (a plain callable's requests are not held)"
        )
    return agents

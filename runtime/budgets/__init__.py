"""Budgets and what holds them.

budget   `Budget` (what may be spent), `BudgetLedger` (reserve before a request, settle after),
         `LocalBudgetLedger` and `LocalBudgets` (held in this process), `Account` (the
         arithmetic, shared with the Ray backend's holders), `worst_case` (a request's
         reservation), `BudgetReport` and `BudgetAmount` (a budget's standing)

May import the base and the models' contract only: the seams (`Backend.budgets`, the
request path's budget link) build on it, and so do agents and batch.
"""

from .budget import (
    DIMENSIONS,
    NOTHING,
    Account,
    Amount,
    Budget,
    BudgetAmount,
    BudgetLedger,
    BudgetReport,
    LocalBudgetLedger,
    LocalBudgets,
    amount_of,
    pricing_of,
    worst_case,
)

__all__ = [
    "DIMENSIONS",
    "NOTHING",
    "Account",
    "Amount",
    "Budget",
    "BudgetAmount",
    "BudgetLedger",
    "BudgetReport",
    "LocalBudgetLedger",
    "LocalBudgets",
    "amount_of",
    "pricing_of",
    "worst_case",
]

"""Spend: budgets and what holds them.

budget   `Budget` (what may be spent), `Ledger` (reserve before a request, settle after),
         `LocalLedger` and `LocalBudgets` (held in this process), `Account` (the
         arithmetic, shared with the Ray backend's holders), `worst_case` (a request's
         reservation), `BudgetReport` and `Spend` (a budget's standing)

May import the base and the models' contract only: the seams (`Backend.budgets`, the
request path's budget link) build on it, and so do agents and batch.
"""

from .budget import (
    DIMENSIONS,
    NOTHING,
    Account,
    Amount,
    Budget,
    BudgetReport,
    Ledger,
    LocalBudgets,
    LocalLedger,
    Spend,
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
    "BudgetReport",
    "Ledger",
    "LocalBudgets",
    "LocalLedger",
    "Spend",
    "amount_of",
    "pricing_of",
    "worst_case",
]

"""Tenants: several users sharing the cluster's endpoints fairly, each within its own
budget and limits (`Tenant`, in `seams.request`: a request's context carries it).

A run names its tenant (`tenant=`: a `Tenant`, or the name of one registered with the
backend, `raygent.register_tenant`: in this process, or on Ray cluster-wide in the
gateway, so every driver sees the same). The run's scope then carries the tenant, and
its budget's ledger beside the run's own (`RunScope.of_tenant`): a tenant's exhausted
budget fails only its own runs' requests, with the budget error, unsent.

Admission (`fair_share.TenantAdmissions`, in front of a backend's `Admissions`, for a
request with a tenant only; one without is admitted as before, at no cost):

    tenant's own max_concurrency ─▶ tenant's own rate ─▶ fair share of the endpoint's
    bound (by weight, among the tenants waiting) ─▶ the backend's admission

The fair share is stride scheduling (start-time fair queueing) per endpoint and event
loop: each tenant has a virtual time, advanced by 1/weight each time one of its requests
goes; when a slot frees, the waiting tenant with the smallest goes next. A tenant that
was idle starts again at the endpoint's virtual time (no credit saved while idle, no
debt kept), so a lone tenant has the whole bound, two busy ones of weights 1 and 3 get
a quarter and three quarters of the slots, and none waits for ever. A request at the
endpoint takes its place only once its tenant's own limits let it go, so a tenant held
back by its own limits holds no one else's slot.

On Ray every process shares its slots this way; the gateway's grants between processes
are the endpoint ledger's (each process's fair share of the bound).
"""

from __future__ import annotations

from typing import Protocol

from ..budgets import BudgetLedger, LocalBudgetLedger
from ..errors import UnknownTenantError
from .attempt import RunScope
from .request import Tenant

__all__ = ["LocalTenants", "Tenant", "Tenants", "tenant_scope"]


class Tenants(Protocol):
    """Where a backend keeps the tenants registered by name, and their budgets' ledgers
    (locally: in this process; Ray: in the gateway, cluster-wide)."""

    def register(self, tenant: Tenant) -> None:
        """Register `tenant` under its name (again: replaced)."""

    def get(self, name: str) -> Tenant | None:
        """The tenant registered as `name` (None: none)."""

    def ledger(self, tenant: Tenant) -> BudgetLedger | None:
        """The ledger of `tenant`'s budget, shared by all its runs (None: no budget)."""


class LocalTenants:
    """Tenants registered in this process (the local backend's `tenants`)."""

    def __init__(self) -> None:
        self._tenants: dict[str, Tenant] = {}
        self._ledgers: dict[str, tuple[Tenant, LocalBudgetLedger]] = {}

    def register(self, tenant: Tenant) -> None:
        if not isinstance(tenant, Tenant):
            raise TypeError(f"register_tenant takes raygent.Tenant(...), not {tenant!r}")
        self._tenants[tenant.name] = tenant

    def get(self, name: str) -> Tenant | None:
        return self._tenants.get(name)

    def ledger(self, tenant: Tenant) -> BudgetLedger | None:
        budget = tenant.budget
        if budget is None:
            return None
        kept = self._ledgers.get(tenant.name)
        if kept is None or kept[0].budget != budget:
            kept = self._ledgers[tenant.name] = (tenant, LocalBudgetLedger(budget, "tenant"))
        return kept[1]


def tenant_scope(scope: RunScope, given: object, tenants: Tenants) -> RunScope:
    """`scope` for a run given `tenant=given` (a `Tenant`, a registered name, or None:
    the scope's own); an unknown name is refused (`UnknownTenantError`)."""
    if given is None:
        return scope
    if isinstance(given, str):
        found = tenants.get(given)
        if found is None:
            raise UnknownTenantError(
                f"no tenant named {given!r} is registered (raygent.register_tenant"
                f"(raygent.Tenant({given!r}, ...)) first, or give the Tenant itself)",
                tenant=given,
            )
        given = found
    if not isinstance(given, Tenant):
        raise TypeError(f"tenant= takes raygent.Tenant(...) or a registered name, not {given!r}")
    return scope.of_tenant(given, tenants.ledger(given))

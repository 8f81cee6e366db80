"""Tenants on Ray: registered cluster-wide in the first gateway replica (`raygent-gw-0`),
so every driver and batch runner sees the same; a tenant's budget is kept there too, as
a job's is (`budgets.RayJobLedger`, keyed by the tenant's name and limits).

A process looks a name up once and keeps the answer (`RayTenants.get`); a tenant
registered anew reaches the processes that had not looked it up yet, and this one at
once.
"""

from __future__ import annotations

import hashlib
from typing import Any

import ray

from raygent.backend import BudgetLedger, Tenant

from .._options import RayOptions
from .access import gateway_handle, gateway_names
from .budgets import RayJobLedger

__all__ = ["RayTenants"]


class RayTenants:
    """The Ray backend's `tenants` (`raygent.backend.Tenants`)."""

    def __init__(self, options: RayOptions | None = None) -> None:
        self.options = options or RayOptions()
        self._known: dict[str, Tenant] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.options,))  # a copy elsewhere looks names up afresh

    def _gateway(self) -> Any:
        return gateway_handle(self.options, gateway_names(1)[0])

    def register(self, tenant: Tenant) -> None:
        if not isinstance(tenant, Tenant):
            raise TypeError(f"register_tenant takes raygent.Tenant(...), not {tenant!r}")
        ray.get(self._gateway().register_tenant.remote(tenant.name, tenant))
        self._known[tenant.name] = tenant

    def get(self, name: str) -> Tenant | None:
        found = self._known.get(name)
        if found is None:
            # Once per name and process (a driver's first run of it, a runner's first item).
            found = ray.get(self._gateway().tenant.remote(name))
            if isinstance(found, Tenant):
                self._known[name] = found
        return found if isinstance(found, Tenant) else None

    def ledger(self, tenant: Tenant) -> BudgetLedger | None:
        budget = tenant.budget
        if budget is None:
            return None
        limits = repr(tuple(budget.limits)).encode()
        key = f"tenant-{tenant.name}-{hashlib.sha256(limits).hexdigest()[:8]}"
        return RayJobLedger(self.options, budget, key)

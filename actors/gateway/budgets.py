"""Jobs' budgets on Ray: kept by the model gateway beside the provider bounds.

`RayBudgets` is the backend's `budgets` seam. A job's ledger (`RayJobLedger`) is small
and picklable: it travels with the run options to every batch runner, and in each
process (and event loop) it is that process's `BudgetLease` on the job's budget, which
the first gateway replica (`raygent-gw-0`) keeps in a `BudgetBook`.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from ray.exceptions import RayActorError, RayTaskError

from raygent.backend import Amount, Budget, BudgetExceededError, BudgetLedger

from .._options import RayOptions
from .access import forget_handle, gateway_handle, gateway_names
from .budget_book import Claim, Slice
from .budget_lease import BudgetLease
from .lease import GatewayUnavailable

__all__ = ["RayBudgets", "RayJobLedger"]


def _keeper() -> str:
    return gateway_names(1)[0]


class _RayBudgetChannel:
    """A lease's way to the gateway that keeps its job's budget."""

    def __init__(self, options: RayOptions, key: str, limits: tuple[float, ...]) -> None:
        self.options, self.key, self.limits = options, key, limits
        self.holder_id = ""

    async def claim(self, claim: Claim) -> Slice:
        handle = gateway_handle(self.options, _keeper())
        try:
            answer: Slice = await handle.budget.remote(self.key, self.limits, self.holder_id, claim)
        except (RayActorError, RayTaskError) as exc:
            forget_handle(self.options, _keeper())
            raise GatewayUnavailable(type(exc).__name__) from None
        return answer

    def release_nowait(self, claim: Claim) -> None:
        handle = gateway_handle(self.options, _keeper())
        handle.budget.remote(self.key, self.limits, self.holder_id, claim)


class _Lease(BudgetLease):
    def __init__(self, budget: Budget, channel: _RayBudgetChannel, idle: float) -> None:
        self._ray_channel = channel
        super().__init__(budget, channel, idle_release=idle)

    def _fresh(self) -> None:
        super()._fresh()
        self._ray_channel.holder_id = self.holder_id


_leases: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], _Lease]] = (
    weakref.WeakKeyDictionary()
)


class RayJobLedger:
    """A job's ledger on Ray: in each process, its lease on the budget the gateway
    keeps (see the module docstring)."""

    scope = "job"

    def __init__(self, options: RayOptions, budget: Budget, key: str) -> None:
        self.options, self.budget, self.key = options, budget, key

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.options, self.budget, self.key))

    def lease(self) -> BudgetLease:
        """This event loop's lease on the job's budget."""
        loop = asyncio.get_running_loop()
        per_loop = _leases.get(loop)
        if per_loop is None:
            per_loop = _leases[loop] = {}
        cache_key = (self.options.namespace, self.key)
        lease = per_loop.get(cache_key)
        if lease is None:
            self.options.connect()
            limits = tuple(self.budget.limits)
            channel = _RayBudgetChannel(self.options, self.key, limits)
            lease = per_loop[cache_key] = _Lease(self.budget, channel, self.options.lease_idle)
        return lease

    async def flush(self) -> None:
        """This process's standing, told to the gateway now (if it holds a lease)."""
        lease = _leases.get(asyncio.get_running_loop(), {}).get((self.options.namespace, self.key))
        if lease is not None:
            await lease.flush()

    @property
    def exhausted(self) -> BudgetExceededError | None:
        return self.lease().exhausted

    async def reserve(self, amount: Amount) -> None:
        await self.lease().reserve(amount)

    def settle(self, amount: Amount, actual: Amount) -> None:
        self.lease().settle(amount, actual)

    async def standing(self) -> tuple[Amount, Amount]:
        """(spent, reserved) as the gateway's book has them (its holders' last reports)."""
        self.options.connect()
        stats: dict[str, Any] = await gateway_handle(self.options, _keeper()).budget_stats.remote(
            self.key
        )
        zero = (0.0,) * 5
        spent = tuple(stats.get("spent", zero))
        reserved = tuple(stats.get("reserved", zero))
        return spent, reserved


class RayBudgets:
    """`Budgets` on Ray: a job's budget is kept by the gateway (see the module docstring)."""

    def __init__(self, options: RayOptions | None = None) -> None:
        self.options = options or RayOptions()

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.options,))

    def job(self, budget: Budget, key: str) -> BudgetLedger:
        return RayJobLedger(self.options, budget, key)

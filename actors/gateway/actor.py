"""The model gateway: the owner of provider bounds, leasing slices of them.

`Gateway` is a plain class; `gateway.access` makes it a named, detached async
Ray actor (`raygent-gw-<i>`), one for the whole cluster by default, hosting the bound
of every endpoint it is asked about (a ledger each, `EndpointLedger`). It sends no HTTP:
the processes that run agents do, each inside the slice it holds. It is usable
in-process too, which is how the lease protocol is unit-tested.

A holder's `sync` is a long poll: it applies the report, then answers at once if the
holder has something new (a grant, a pause, rate budget), else when it has, or after
`poll` seconds (a heartbeat that renews the lease). A newer call from the same holder
answers the one it supersedes. Holders that stop reporting lose their slice after
`lease_ttl`; a gateway that restarted (its node lost, killed) grants nothing new for one
`lease_ttl` while holders claim what they still use. With no holder for `idle_timeout`
seconds the gateway ends itself (`on_idle`): it outlives any one driver, not the work.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from .budget_book import BudgetBook, Claim, Slice
from .endpoint_ledger import Bounds, EndpointLedger, Grant, Report
from .rate_budget import Rates

__all__ = ["Gateway", "GatewayClosedError"]


class GatewayClosedError(Exception):
    """The gateway is ending itself (idle): ask the next one (look it up anew)."""


@dataclass(eq=False)
class _Endpoint:
    ledger: EndpointLedger
    parked: dict[str, asyncio.Future[None]] = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None


class Gateway:
    """Leases the bounds of the endpoints it hosts (see the module docstring)."""

    def __init__(
        self,
        lease_ttl: float = 10.0,
        idle_timeout: float = 600.0,
        *,
        restarted: bool = False,
        on_idle: Callable[[], None] | None = None,
    ) -> None:
        self.lease_ttl = lease_ttl
        self.idle_timeout = idle_timeout
        self.poll = lease_ttl / 3
        self.incarnation = uuid.uuid4().hex[:12]
        self._claims_until = time.monotonic() + lease_ttl if restarted else 0.0
        self._endpoints: dict[str, _Endpoint] = {}
        self._books: dict[str, BudgetBook] = {}  # jobs' budgets, by job key
        self._tenants: dict[str, object] = {}  # tenants registered, by name
        self._on_idle = on_idle
        self._idle_since = time.monotonic()
        self._closing = False
        self._ticker: asyncio.Task[None] | None = None
        self.syncs = 0

    async def sync(
        self, key: str, bounds: Bounds, holder_id: str, report: Report, wait: bool = True
    ) -> Grant:
        """Apply `report`, then answer with the holder's grant (see the module docstring)."""
        if self._closing:
            raise GatewayClosedError(f"gateway {self.incarnation} is closing")
        self._start()
        self.syncs += 1
        endpoint = self._endpoint(key, bounds)
        now = time.monotonic()
        self._wake(
            endpoint,
            endpoint.ledger.report(
                holder_id, report, self.incarnation, now, self.lease_ttl, bounds
            ),
        )
        self._schedule_rates(endpoint)
        current = endpoint.ledger.holders.get(holder_id)
        if wait and current is not None and current.version == report.version:
            await self._park(endpoint, holder_id)
        return endpoint.ledger.grant_for(
            holder_id, self.incarnation, time.monotonic(), self.lease_ttl, time.time()
        )

    async def budget(
        self, key: str, limits: tuple[float, ...], holder_id: str, claim: Claim
    ) -> Slice:
        """Apply a holder's claim on the job `key`'s budget (made with `limits` by the
        first to ask) and answer with its slice (`budget_book`); answered at once."""
        if self._closing:
            raise GatewayClosedError(f"gateway {self.incarnation} is closing")
        self._start()
        self.syncs += 1
        book = self._books.get(key)
        if book is None:
            book = self._books[key] = BudgetBook(limits)
        return book.claim(holder_id, claim, self.incarnation, time.monotonic(), self.lease_ttl)

    async def register_tenant(self, name: str, tenant: object) -> None:
        """Register a tenant (a `raygent.Tenant`, kept as given) for every driver."""
        self._tenants[name] = tenant

    async def tenant(self, name: str) -> object | None:
        """The tenant registered as `name` (None: none)."""
        return self._tenants.get(name)

    async def budget_stats(self, key: str | None) -> dict[str, object]:
        """One job's budget as the book keeps it (limits, spent, reserved, holders);
        with no key, every job's, by key."""
        if key is None:
            return {k: book.stats() for k, book in self._books.items()}
        book = self._books.get(key)
        return {} if book is None else book.stats()

    async def release(self, key: str, holder_id: str, returned: Rates) -> None:
        """A holder gives its slice (and unused rate budget) back."""
        endpoint = self._endpoints.get(key)
        if endpoint is not None:
            self._wake(endpoint, endpoint.ledger.release(holder_id, returned, time.monotonic()))
            self._unpark(endpoint, holder_id)

    async def stats(self, key: str | None = None) -> dict[str, float]:
        """One endpoint's ledger (limit, granted, occupied, in use, holders, pause), or
        with no key the gateway's own counters."""
        if key is None:
            return {"endpoints": len(self._endpoints), "syncs": self.syncs}
        endpoint = self._endpoints.get(key)
        if endpoint is None:
            return {}
        return endpoint.ledger.stats(time.monotonic())

    # -- long polls -----------------------------------------------------------------------

    async def _park(self, endpoint: _Endpoint, holder_id: str) -> None:
        self._unpark(endpoint, holder_id)  # a newer call supersedes the parked one
        waiter = asyncio.get_running_loop().create_future()
        endpoint.parked[holder_id] = waiter
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.poll)
        except asyncio.TimeoutError:
            pass
        finally:
            if endpoint.parked.get(holder_id) is waiter:
                del endpoint.parked[holder_id]

    def _unpark(self, endpoint: _Endpoint, holder_id: str) -> None:
        waiter = endpoint.parked.pop(holder_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake(self, endpoint: _Endpoint, holders: set[str]) -> None:
        for holder_id in holders:
            self._unpark(endpoint, holder_id)

    def _schedule_rates(self, endpoint: _Endpoint) -> None:
        """Rate budget someone waits for: rebalance again when it has refilled."""
        if endpoint.timer is not None:
            return
        delay = endpoint.ledger.rates_ready_in(time.monotonic())
        if delay is None:
            return

        def refilled() -> None:
            endpoint.timer = None
            self._wake(endpoint, endpoint.ledger.rebalance(time.monotonic()))
            self._schedule_rates(endpoint)

        endpoint.timer = asyncio.get_running_loop().call_later(max(delay, 0.001), refilled)

    def _endpoint(self, key: str, bounds: Bounds) -> _Endpoint:
        endpoint = self._endpoints.get(key)
        if endpoint is None:
            # Until its holders declare theirs, the limits of the first one to ask.
            ledger = EndpointLedger(bounds, time.monotonic(), claims_until=self._claims_until)
            endpoint = self._endpoints[key] = _Endpoint(ledger)
        return endpoint

    # -- expiry and idleness --------------------------------------------------------------

    def _start(self) -> None:
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        """Expire lapsed leases (their slices go to the others), end when idle."""
        while True:
            await asyncio.sleep(self.lease_ttl / 4)
            now = time.monotonic()
            held = False
            for endpoint in self._endpoints.values():
                self._wake(endpoint, endpoint.ledger.rebalance(now))
                held = held or bool(endpoint.ledger.holders)
            for book in self._books.values():
                held = book.expire(now) or held
            if held or self._tenants:  # registered tenants outlive their drivers
                self._idle_since = now
            elif now - self._idle_since >= self.idle_timeout and self._on_idle is not None:
                self._closing = True  # refuse new holders: they will find the next one
                self._on_idle()
                return

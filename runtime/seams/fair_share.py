"""A tenant's request admitted: its own limits, then its fair share of the endpoint's
bound by weight (`seams.tenants` says how tenants share), in front of a backend's
`Admissions` (`TenantAdmissions`: both backends' access layers stand on it)."""

from __future__ import annotations

import asyncio
import collections
import time
import weakref
from collections.abc import Hashable

from ..abort import abortable
from ..errors import RateLimitError
from ..models.contract import Limits, ModelResponse
from ..rates import Bucket, estimate
from .access import Admission, Admissions
from .request import ModelRequest, Tenant

__all__ = ["NO_TENANT", "FairShare", "TenantAdmissions"]

# Requests with no tenant, where tenants share their endpoint: one tenant of weight 1.
NO_TENANT = Tenant("(no tenant)")


class FairShare:
    """One endpoint's bound in one event loop, shared by tenants by weight (see the
    module docstring). Each request brings its own model's limit, as `EndpointBound`'s."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.vtime = 0.0  # the virtual time of the last request let through
        self._passes: dict[str, float] = {}  # each tenant's virtual time
        self._weights: dict[str, float] = {}
        self._waiting: dict[str, collections.deque[tuple[int, asyncio.Future[None]]]] = {}

    async def acquire(self, tenant: Tenant, limit: int) -> None:
        """Take a slot once fewer than `limit` are taken and it is `tenant`'s turn;
        give it back with `release`."""
        if not self._waiting and self.in_flight < limit:
            self._went(tenant.name, tenant.weight)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (limit, future)
        queue = self._waiting.get(tenant.name)
        if queue is None:
            queue = self._waiting[tenant.name] = collections.deque()
            # Back from idle: no credit for the time it did not ask.
            self._passes[tenant.name] = max(self._passes.get(tenant.name, 0.0), self.vtime)
        queue.append(entry)
        self._weights[tenant.name] = tenant.weight
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # let through, then cancelled before it could use the slot
            else:
                queue.remove(entry)
                if not queue and self._waiting.get(tenant.name) is queue:
                    del self._waiting[tenant.name]
                self._admit()
            raise

    def release(self) -> None:
        self.in_flight -= 1
        self._admit()

    def _went(self, name: str, weight: float) -> None:
        start = max(self._passes.get(name, 0.0), self.vtime)
        self.vtime = start
        self._passes[name] = start + 1.0 / weight
        self.in_flight += 1

    def _admit(self) -> None:
        waiting, passes = self._waiting, self._passes
        while waiting:
            name = min(waiting, key=passes.__getitem__)
            queue = waiting[name]
            limit, future = queue[0]
            if self.in_flight >= limit:
                return  # its turn, not yet its room: no one overtakes it
            queue.popleft()
            if not queue:
                del waiting[name]
            self._went(name, self._weights[name])
            future.set_result(None)


class _TenantHold:
    """One tenant's own limits in one event loop: its requests in flight (at most its
    `max_concurrency`, first come first served) and its rate (smooth buckets)."""

    def __init__(self, tenant: Tenant) -> None:
        self.tenant = tenant
        self.in_flight = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        rate = tenant.rate_limit
        self._buckets: list[Bucket | None] = []
        if rate is not None:
            now = time.monotonic()
            self._buckets = [
                None if per_minute is None else Bucket(per_minute / 60.0, rate.burst, now)
                for per_minute in rate.per_minute
            ]

    async def acquire(self, request: ModelRequest) -> None:
        limit = self.tenant.max_concurrency
        if limit is not None:
            if self._waiters or self.in_flight >= limit:
                future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._waiters.append(future)
                try:
                    await abortable(future, request.signal)
                except BaseException:
                    if future.done() and not future.cancelled():
                        self.release()
                    elif future in self._waiters:
                        self._waiters.remove(future)
                    raise
            else:
                self.in_flight += 1
        else:
            self.in_flight += 1
        if any(self._buckets):
            try:
                await self._rate(request)
            except BaseException:
                self.release()
                raise

    async def _rate(self, request: ModelRequest) -> None:
        """Wait (abortably) until its rate has room for `request`, then take it."""
        prompt, output = estimate(request.messages, request.options, request.model)
        need = (1.0, float(prompt + output), float(prompt), float(output))
        pairs = [(b, n) for b, n in zip(self._buckets, need, strict=True) if b is not None]
        while True:
            now = time.monotonic()
            wait = max(bucket.ready_in(amount, now) for bucket, amount in pairs)
            if wait <= 0:
                for bucket, amount in pairs:
                    bucket.take(amount, now)
                return
            await abortable(asyncio.sleep(wait), request.signal)

    def release(self) -> None:
        self.in_flight -= 1
        while self._waiters:
            future = self._waiters.popleft()
            if not future.done():
                self.in_flight += 1
                future.set_result(None)
                return


class _TenantAdmission:
    """A tenant's request let through: the backend's admission, and its places in the
    endpoint's fair share and its tenant's own limits, given back when it is done."""

    __slots__ = ("_hold", "_inner", "_share", "rate_wait")

    def __init__(self, inner: Admission, share: FairShare | None, hold: _TenantHold | None) -> None:
        self._inner, self._share, self._hold = inner, share, hold
        self.rate_wait = inner.rate_wait

    def answered(self, response: ModelResponse) -> None:
        self._inner.answered(response)

    def throttled(self, error: RateLimitError, pause: float | None) -> None:
        self._inner.throttled(error, pause)

    def failed(self) -> None:
        self._inner.failed()

    def done(self) -> None:
        self._inner.done()
        if self._share is not None:
            self._share.release()
        if self._hold is not None:
            self._hold.release()


class TenantAdmissions:
    """A backend's `Admissions` with tenants in front (see the module docstring). A
    request with no tenant goes straight to `inner`, unless tenants share its endpoint
    in this event loop: then it takes its turn among them as a tenant of weight 1."""

    __slots__ = ("_holds", "_shares", "_tenanted", "inner")

    def __init__(self, inner: Admissions) -> None:
        self.inner = inner
        self._tenanted = False  # a tenant's request came: the others may meet tenants
        self._shares: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[Hashable, FairShare]
        ] = weakref.WeakKeyDictionary()
        self._holds: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, _TenantHold]
        ] = weakref.WeakKeyDictionary()

    async def admit(self, request: ModelRequest, limits: Limits) -> Admission:
        tenant = request.context.tenant
        if tenant is None:
            if not self._tenanted:  # the common case: no tenants in this process
                return await self.inner.admit(request, limits)
            return await self._untenanted(request, limits)
        loop = asyncio.get_running_loop()
        hold = self._hold(loop, tenant)
        await hold.acquire(request)
        share: FairShare | None = None
        try:
            limit = limits.max_concurrency
            if limit:
                fair = self._share(loop, limits.endpoint)
                await abortable(fair.acquire(tenant, limit), request.signal)
                share = fair
            inner = await self.inner.admit(request, limits)
        except BaseException:
            if share is not None:
                share.release()
            hold.release()
            raise
        return _TenantAdmission(inner, share, hold)

    async def _untenanted(self, request: ModelRequest, limits: Limits) -> Admission:
        shares = self._shares.get(asyncio.get_running_loop())
        share = None if shares is None else shares.get(limits.endpoint)
        if share is None or not limits.max_concurrency:
            return await self.inner.admit(request, limits)
        await abortable(share.acquire(NO_TENANT, limits.max_concurrency), request.signal)
        try:
            inner = await self.inner.admit(request, limits)
        except BaseException:
            share.release()
            raise
        return _TenantAdmission(inner, share, None)

    def _hold(self, loop: asyncio.AbstractEventLoop, tenant: Tenant) -> _TenantHold:
        per_loop = self._holds.get(loop)
        if per_loop is None:
            per_loop = self._holds[loop] = {}
        hold = per_loop.get(tenant.name)
        if hold is None or (hold.tenant is not tenant and _differs(hold.tenant, tenant)):
            hold = per_loop[tenant.name] = _TenantHold(tenant)
        return hold

    def _share(self, loop: asyncio.AbstractEventLoop, endpoint: Hashable) -> FairShare:
        per_loop = self._shares.get(loop)
        if per_loop is None:
            per_loop = self._shares[loop] = {}
        share = per_loop.get(endpoint)
        if share is None:
            share = per_loop[endpoint] = FairShare()
            self._tenanted = True
        return share


def _differs(a: Tenant, b: Tenant) -> bool:
    """Whether `b` (a tenant of `a`'s name) limits otherwise (registered anew)."""
    return (a.max_concurrency, a.rate_limit) != (b.max_concurrency, b.rate_limit)

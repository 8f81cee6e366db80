"""Leases in-process: a gateway object and the leases of several 'processes' in one event
loop, joined by channels that may delay (and so reorder) every call, as Ray may.

The lease protocol is tested here without Ray; tests/ray/test_ray_gateway.py runs it on
Ray (gateway actors, runners and drivers in other processes).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import replace

from raygent.actors import Bounds, Gateway
from raygent.actors.gateway.endpoint_ledger import Grant, Report
from raygent.actors.gateway.lease import EndpointLease, GatewayUnavailable
from raygent.actors.gateway.rate_budget import Rates

KEY = "endpoint"


class LocalChannel:
    """A lease slice's channel to a `Gateway` in this loop. `delay`: each call waits a
    random time up to this on the way there and back. `down`: calls fail as if the
    gateway were unreachable. `calls`: how many syncs were made."""

    def __init__(
        self, gateway: Gateway, bounds: Bounds, holder: str, *, delay: float = 0.0, seed: int = 0
    ) -> None:
        self.gateway, self.bounds, self.holder = gateway, bounds, holder
        self.name = f"local gateway ({holder})"
        self.delay = delay
        self.down = False
        self.calls = 0
        self._random = random.Random(seed)

    async def _hop(self) -> None:
        if self.delay:
            await asyncio.sleep(self._random.uniform(0, self.delay))
        if self.down:
            raise GatewayUnavailable("the test took it down")

    async def sync(self, report: Report, wait: bool) -> Grant:
        self.calls += 1
        await self._hop()
        grant = await self.gateway.sync(KEY, self.bounds, self.holder, replace(report), wait)
        await self._hop()
        return grant

    async def release(self, returned: Rates) -> None:
        await self._hop()
        await self.gateway.release(KEY, self.holder, returned)

    def release_nowait(self, returned: Rates) -> None:
        self._closing = asyncio.ensure_future(self.gateway.release(KEY, self.holder, returned))


def leases(
    gateway: Gateway,
    bounds: Bounds,
    count: int,
    *,
    delay: float = 0.0,
    idle_release: float = 0.5,
    name: str = "holder",
) -> list[EndpointLease]:
    """`count` processes' leases on one endpoint of `gateway`."""
    return [
        EndpointLease(
            [LocalChannel(gateway, bounds, f"{name}-{i}", delay=delay, seed=i)],
            idle_release=idle_release,
        )
        for i in range(count)
    ]


class InFlight:
    """Counts requests in flight across every lease: the peak must never pass the bound."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self.done = 0
        self.sent: list[float] = []  # when each was admitted (monotonic)

    async def request(self, lease: EndpointLease, seconds: float) -> None:
        ticket = await lease.admit()
        self.sent.append(time.monotonic())
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await asyncio.sleep(seconds)
        finally:
            self.now -= 1
            ticket.ok = True
            lease.done(ticket)
            self.done += 1

"""One endpoint's concurrency bound within one event loop (the local backend's).

Each request brings its own model's `max_concurrency`: it is sent only while fewer than
that many requests to the endpoint are in flight. Models that declare different bounds
for one endpoint therefore each have theirs honoured, the tightest included, and a model
rebuilt with a new bound (a notebook's second try) is held to the new one at once, not
to whatever the first model to reach the endpoint declared. Waiters are served in
arrival order.
"""

from __future__ import annotations

import asyncio
import collections

__all__ = ["EndpointBound"]


class EndpointBound:
    """Requests in flight to one endpoint, admitted each under its own limit."""

    def __init__(self) -> None:
        self.in_flight = 0
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    async def acquire(self, limit: int) -> None:
        """Take one of the endpoint's slots, once fewer than `limit` are taken; give it
        back with `release`."""
        if not self._waiters and self.in_flight < limit:
            self.in_flight += 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (limit, future)
        self._waiters.append(entry)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # admitted, then cancelled before it could use the slot
            else:
                self._waiters.remove(entry)
                self._admit()  # it may have held back the ones behind it
            raise

    def release(self) -> None:
        self.in_flight -= 1
        self._admit()

    def _admit(self) -> None:
        # Strictly first come, first served: the first waiter that cannot go yet holds
        # back those behind it, so a tight model's requests are never starved.
        while self._waiters and self.in_flight < self._waiters[0][0]:
            _, future = self._waiters.popleft()
            self.in_flight += 1
            future.set_result(None)

"""`concurrency` under `provider_batch=`: the attempts *working* at once (running a tool,
an online trip, reading a reply), not the attempts held.

An attempt takes a slot when it starts and gives it back while it waits for a line of a
provider batch (hours, maybe): a run waiting for its line holds no connection and does
no work, only memory. So the items in flight are bounded by `ProviderBatch.max_waiting`
(the pool's size), and all of them can join one batch per trip, while tools and online
trips still run at most `concurrency` at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from ..abort import AbortSignal
from .provider.trip_lines import Answer, LineSender

__all__ = ["ActiveSlots"]


class _Hold:
    """An attempt's hold on a slot; `waiting` counts its trips waiting for lines (a
    tool that runs an agent of its own may wait on two at once)."""

    __slots__ = ("held", "waiting")

    def __init__(self) -> None:
        self.held = False
        self.waiting = 0


class ActiveSlots:
    """`slots` attempts working at once; an attempt waiting for a line gives its slot
    back (see the module's docstring). Made in the event loop that runs the attempts."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"concurrency must be at least 1, not {slots}")
        self.slots = slots
        self._free = asyncio.Semaphore(slots)

    @contextlib.asynccontextmanager
    async def working(self, sender: LineSender) -> AsyncIterator[LineSender]:
        """An attempt holding a slot (but while it waits for its lines): the sender its
        lines go through, which gives the slot back while a line is out."""
        hold = _Hold()
        try:
            await self._free.acquire()
            hold.held = True
            yield _Releasing(sender, self._free, hold)
        finally:
            if hold.held:
                hold.held = False
                self._free.release()


class _Releasing:
    """A `LineSender` that gives its attempt's slot back while its line is out."""

    __slots__ = ("_free", "_hold", "_sender")

    def __init__(self, sender: LineSender, free: asyncio.Semaphore, hold: _Hold) -> None:
        self._sender = sender
        self._free = free
        self._hold = hold

    async def line(
        self, model: Any, custom_id: str, line: bytes, signal: AbortSignal | None
    ) -> Answer:
        hold = self._hold
        hold.waiting += 1
        if hold.waiting == 1 and hold.held:
            hold.held = False
            self._free.release()
        stopping = False
        try:
            return await self._sender.line(model, custom_id, line, signal)
        except asyncio.CancelledError:
            stopping = True
            raise
        finally:
            hold.waiting -= 1
            # Back to work (a reply, or an error the run may go on from): a slot first.
            # An attempt cancelled or aborted only ends: it waits for no slot.
            stopping = stopping or (signal is not None and signal.aborted)
            if hold.waiting == 0 and not hold.held and not stopping:
                await self._free.acquire()
                hold.held = True

    def __getattr__(self, name: str) -> Any:
        # What else the sender offers (`count`, `note_online`) is looked up by name.
        return getattr(self._sender, name)

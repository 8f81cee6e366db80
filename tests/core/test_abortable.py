"""`abortable`: an await the abort signal ends, closing what it held."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from raygent.abort import AbortController, abortable
from raygent.errors import AbortedError


async def test_an_await_under_a_signal_that_fired_already_is_closed_unstarted() -> None:
    controller = AbortController()
    controller.abort("stop")

    async def read() -> bytes:
        return b"never"

    pending = read()
    with pytest.raises(AbortedError, match="stop"):
        await abortable(pending, controller.signal)
    # Closed, not left for the garbage collector to warn about.
    assert inspect.getcoroutinestate(pending) == inspect.CORO_CLOSED


async def test_an_abort_mid_await_cancels_it_and_raises() -> None:
    controller = AbortController()
    started = asyncio.Event()

    async def hang() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.ensure_future(abortable(hang(), controller.signal))
    await started.wait()
    controller.abort("enough")
    with pytest.raises(AbortedError, match="enough"):
        await task

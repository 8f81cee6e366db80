"""What the stores that hold a client per event loop (Redis, PostgreSQL) share: a closer
that the loop itself runs when it shuts down."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable

__all__ = ["closer"]


async def _close_when_finalised(
    close: Callable[[], Awaitable[None]], forget: Callable[[], None]
) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        try:
            await close()
        finally:
            forget()


def closer(
    close: Callable[[], Awaitable[None]], forget: Callable[[], None]
) -> AsyncGenerator[None, None]:
    """An async generator, started here in the client's loop, whose `aclose()` runs
    `close` (then `forget`). The loop knows its started async generators, and
    `shutdown_asyncgens()` (asyncio.run calls it before it closes the loop) finalises them
    while the loop still runs: so a loop that ends without `store.aclose()` still closes
    its connections, rather than leaving sockets open on a dead loop (ResourceWarning)."""
    generator = _close_when_finalised(close, forget)
    step = generator.asend(None)
    try:
        step.send(None)  # runs up to the `yield` (nothing there awaits)
    except StopIteration:
        return generator
    raise AssertionError("the closer did not stop at its yield")

"""One HTTP client per event loop, shared by every adapter, closed with its loop.

aiohttp sessions are bound to the loop that made them, and a model may be used from
several loops (`asyncio.run` per call, pytest, Ray actors). So the pool is keyed by loop
and closed when the loop shuts down: an async generator parked in each loop is finalised
by `loop.shutdown_asyncgens()` (which `asyncio.run` calls), and its `finally` closes the
client; if the loop lives on, the client lives on.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from httpx_aiohttp import AiohttpTransport

# max_connections=0 is aiohttp's "no limit": concurrency is bounded by the model
# gateway (which knows the provider's limits), never by a hidden pool size.
_LIMITS = httpx.Limits(max_connections=0, keepalive_expiry=30.0)

_clients: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop,
    tuple[httpx.AsyncClient, AiohttpTransport, AsyncGenerator[None, None]],
] = weakref.WeakKeyDictionary()


async def shared_transport() -> httpx.AsyncBaseTransport:
    """The running loop's transport, created on first use.

    Adapters send `httpx.Request`s to it directly: the client's per-request work
    (merging defaults, auth and redirect flows, hooks) is a third of the CPU of a call
    and none of it applies to a provider POST.
    """
    loop = asyncio.get_running_loop()
    entry = _clients.get(loop)
    if entry is not None and not entry[0].is_closed:
        return entry[1]
    # Imported here, on a loop's first request: aiohttp costs ~0.1 s to import, which a
    # process that never calls a model (a session host, a tool executor) does not pay.
    from httpx_aiohttp import AiohttpTransport

    transport = AiohttpTransport(limits=_LIMITS)
    client = httpx.AsyncClient(transport=transport)
    closer = _close_with_loop(client)
    await closer.__anext__()
    _clients[loop] = (client, transport, closer)
    return transport


async def _close_with_loop(client: httpx.AsyncClient) -> AsyncGenerator[None, None]:
    try:
        yield
        await asyncio.Event().wait()  # parked until the loop finalises us
    finally:
        await client.aclose()

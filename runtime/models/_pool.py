"""One aiohttp session per event loop, shared by every adapter, closed with its loop.

aiohttp sessions are bound to the loop that made them, and a model may be used from
several loops (`asyncio.run` per call, pytest, Ray actors). So the pool is keyed by loop
and closed when the loop shuts down: an async generator parked in each loop is finalised
by `loop.shutdown_asyncgens()` (which `asyncio.run` calls), and its `finally` closes the
session; if the loop lives on, the session lives on.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import weakref
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import aiohttp

# How long an idle connection is kept for the next request (httpx's default too).
_KEEPALIVE = 30.0

_sessions: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, tuple[aiohttp.ClientSession, AsyncGenerator[None, None]]
] = weakref.WeakKeyDictionary()


async def shared_session() -> aiohttp.ClientSession:
    """The running loop's session, created on first use.

    Adapters send on it directly, building no httpx Request or Response: the client's
    per-request work (merging defaults, auth and redirect flows, hooks, its header and
    stream models) is a third of the CPU of a call and none of it applies to a provider
    POST. No connection limit (aiohttp's 0): concurrency is bounded by the model gateway,
    which knows the provider's limits, never by a hidden pool size. Certificates as httpx
    finds them (certifi, `SSL_CERT_FILE` / `SSL_CERT_DIR`); no proxy from the environment.
    """
    loop = asyncio.get_running_loop()
    entry = _sessions.get(loop)
    if entry is not None and not entry[0].closed:
        return entry[0]
    # Imported here, on a loop's first request: aiohttp costs ~0.1 s to import, which a
    # process that never calls a model (a session host, a tool executor) does not pay.
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=_KEEPALIVE, ssl=_ssl_context())
    session = aiohttp.ClientSession(connector=connector, auto_decompress=True)
    closer = _close_with_loop(session)
    await closer.__anext__()
    _sessions[loop] = (session, closer)
    return session


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Made once per process (loading the CA bundle costs ~10 ms), shared by every loop's
    # session: a context holds settings, not connections.
    import httpx

    return httpx.create_ssl_context()


async def _close_with_loop(session: aiohttp.ClientSession) -> AsyncGenerator[None, None]:
    try:
        yield
        await asyncio.Event().wait()  # parked until the loop finalises us
    finally:
        await session.close()

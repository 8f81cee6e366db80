"""Sending a request and reading its reply, typed whatever fails.

Without an injected client a request goes straight to the running loop's shared aiohttp
session (`_pool`), building no httpx Request or Response (measured,
`benchmarks/bench_adapter_throughput.py`: that layer was a quarter of an adapter's CPU
per request). An injected `httpx.AsyncClient` is sent an `httpx.Request`, as its owner
configured it. Either way the same holds: the model's timeouts (connect, read, pool),
a body over 1 MiB sent in chunks (sent whole, it would hold the loop), the reply
streamed, a cancelled await closing the connection, and every failure typed: a timeout
(`ProviderTimeoutError`), a host that cannot be reached (`ProviderConnectionError`,
naming it), a reply that broke off (`ProviderResponseError`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from ..errors import (
    ProviderConnectionError,
    ProviderError,
    ProviderResponseError,
    ProviderTimeoutError,
    redact,
)
from ._pool import shared_session

if TYPE_CHECKING:
    import aiohttp

__all__ = ["LARGE_BODY", "Opened", "Outgoing", "Timeouts", "send"]

LARGE_BODY = 1 << 20

# (connect, read, write, pool) seconds, as `httpx.Timeout` holds them.
Timeouts = tuple[float | None, float | None, float | None, float | None]
_TIMEOUT_KEYS = ("connect", "read", "write", "pool")


@dataclass(slots=True)
class Outgoing:
    """A request as it leaves: what a wire that signs its requests signs (SigV4 over
    the body's bytes) or adds a fresh credential to (`HTTPModel.sign`)."""

    method: str
    url: str
    headers: dict[str, str]
    content: bytes | None


def timeouts_of(timeout: httpx.Timeout) -> Timeouts:
    return (timeout.connect, timeout.read, timeout.write, timeout.pool)


class Opened:
    """A reply whose status and headers have come; its body is read on demand, each
    failure typed. `aclose()` hands a finished connection back to the pool and closes
    an unfinished one."""

    __slots__ = ("headers", "provider", "secrets", "status")

    status: int
    headers: Mapping[str, str]

    def __init__(self, provider: str, secrets: tuple[str, ...]) -> None:
        self.provider, self.secrets = provider, secrets

    async def read(self) -> bytes:
        """The whole body."""
        raise NotImplementedError

    async def chunk(self) -> bytes:
        """The next bytes of the body as they come; b"" at its end."""
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    def broke_off(self, exc: BaseException, what: str) -> ProviderError:
        if _timed_out(exc):
            return ProviderTimeoutError(
                _transport_text(exc, self.provider, self.secrets), provider=self.provider
            )
        return ProviderResponseError(
            f"{self.provider}: the {what} broke off: "
            + _transport_text(exc, self.provider, self.secrets),
            provider=self.provider,
        )


async def send(
    request: Outgoing,
    timeouts: Timeouts,
    client: httpx.AsyncClient | None,
    *,
    provider: str,
    secrets: tuple[str, ...],
) -> Opened:
    """Send `request`; its reply once the status and headers came (its body unread)."""
    content: bytes | AsyncIterator[bytes] | None = request.content
    headers = request.headers
    if request.content is not None and len(request.content) > LARGE_BODY:
        headers = {**headers, "content-length": str(len(request.content))}
        content = _chunks(request.content)
    try:
        if client is None:
            session = await shared_session()
            response = await session.request(
                request.method,
                _yarl(request.url),
                data=content,
                headers=headers,
                timeout=_aiohttp_timeout(timeouts),
                allow_redirects=False,
            )
            return _AiohttpOpened(response, provider, secrets)
        sent = httpx.Request(
            request.method,
            request.url,
            content=content,
            headers=headers,
            extensions={"timeout": dict(zip(_TIMEOUT_KEYS, timeouts, strict=True))},
        )
        return _HttpxOpened(await client.send(sent, stream=True), provider, secrets)
    except Exception as exc:
        if not _transport_failure(exc):
            raise
        if _timed_out(exc):
            raise ProviderTimeoutError(
                _transport_text(exc, provider, secrets), provider=provider
            ) from None
        raise ProviderConnectionError(
            _connect_text(request.url, exc, provider, secrets), provider=provider
        ) from None


class _AiohttpOpened(Opened):
    __slots__ = ("_response",)

    def __init__(
        self, response: aiohttp.ClientResponse, provider: str, secrets: tuple[str, ...]
    ) -> None:
        super().__init__(provider, secrets)
        self._response = response
        self.status = response.status
        self.headers = response.headers

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except Exception as exc:
            if not _transport_failure(exc):
                raise
            raise self.broke_off(exc, "reply") from None

    async def chunk(self) -> bytes:
        try:
            return await self._response.content.readany()
        except Exception as exc:
            if not _transport_failure(exc):
                raise
            raise self.broke_off(exc, "stream") from None

    async def aclose(self) -> None:
        self._response.release()


class _HttpxOpened(Opened):
    __slots__ = ("_chunks", "_response")

    def __init__(self, response: httpx.Response, provider: str, secrets: tuple[str, ...]) -> None:
        super().__init__(provider, secrets)
        self._response = response
        self._chunks: AsyncIterator[bytes] | None = None
        self.status = response.status_code
        self.headers = response.headers

    async def read(self) -> bytes:
        try:
            return await self._response.aread()
        except httpx.TransportError as exc:
            raise self.broke_off(exc, "reply") from None

    async def chunk(self) -> bytes:
        if self._chunks is None:
            self._chunks = self._response.aiter_bytes()
        try:
            return await anext(self._chunks, b"")
        except httpx.TransportError as exc:
            raise self.broke_off(exc, "stream") from None

    async def aclose(self) -> None:
        await self._response.aclose()


async def _chunks(content: bytes) -> AsyncIterator[bytes]:
    view = memoryview(content)
    for start in range(0, len(content), LARGE_BODY):
        yield bytes(view[start : start + LARGE_BODY])


@functools.lru_cache(maxsize=256)
def _yarl(url: str) -> Any:
    # Parsed once per URL (a model posts to one or two): aiohttp would parse a string
    # on every request. Taken as encoded: left as the wire built it, a signed path's
    # escapes included (requoted, `%3A` would go out as `:` and fail its signature).
    from yarl import URL

    return URL(url, encoded=True)


@functools.lru_cache(maxsize=64)
def _aiohttp_timeout(timeouts: Timeouts) -> aiohttp.ClientTimeout:
    import aiohttp

    connect, read, _, pool = timeouts
    # As httpx's aiohttp transport maps them: no total (a long reply is not cut off).
    return aiohttp.ClientTimeout(sock_connect=connect, sock_read=read, connect=pool)


def _transport_failure(exc: BaseException) -> bool:
    """Whether `exc` is the transport's (a timeout, a socket's error, the client's):
    anything else is a bug, and goes up as it is."""
    if isinstance(exc, (httpx.TransportError, asyncio.TimeoutError, OSError)):
        return True
    import aiohttp  # loaded already: only a request gets here

    return isinstance(exc, aiohttp.ClientError)


def _timed_out(exc: BaseException) -> bool:
    """Whether a transport failure is a timeout. httpx-aiohttp (a client a user injects
    may run on it) maps every aiohttp connection error (a refused connection, a failed
    DNS lookup, a server that hung up) to `httpx.ConnectTimeout`; what it wraps says
    what happened."""
    if isinstance(exc, asyncio.TimeoutError):  # aiohttp's own timeouts are these
        return True
    if not isinstance(exc, httpx.TimeoutException):
        return False
    cause = exc.__cause__
    return (
        cause is None
        or isinstance(cause, asyncio.TimeoutError)
        or not type(cause).__module__.startswith("aiohttp")
    )


def _transport_text(exc: BaseException, provider: str, secrets: tuple[str, ...]) -> str:
    detail = redact(str(exc), secrets) or type(exc).__name__
    return f"{provider}: {type(exc).__name__}: {detail}"


def _connect_text(url: str, exc: BaseException, provider: str, secrets: tuple[str, ...]) -> str:
    """Which host could not be reached, and why (the OS's reason, not the client
    library's wording: aiohttp's says `ssl:default` even of a plain http:// URL)."""
    cause = exc.__cause__
    reason = getattr(exc, "os_error", None) or getattr(cause, "os_error", None) or cause or exc
    detail = redact(str(reason), secrets) or type(reason).__name__
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # not a port number: said as it came
        return f"{provider}: cannot connect to {parts.netloc}: {detail}"
    return f"{provider}: cannot connect to {parts.hostname}:{port}: {detail}"

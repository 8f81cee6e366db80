"""What every HTTP model adapter shares: the client, auth, limits, sending, SSE."""

from __future__ import annotations

import difflib
import functools
import hashlib
import inspect
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, ClassVar, Protocol, TypedDict

import httpx
import pydantic_core
from typing_extensions import Unpack

from ..abort import AbortSignal, AbortWatch, abortable
from ..errors import (
    AuthenticationError,
    OfflineError,
    ProviderConnectionError,
    ProviderError,
    ProviderResponseError,
    ProviderTimeoutError,
    redact,
)
from ..pricing import Pricing, price_usage
from ..rates.limits import RateLimit, RateReading, rate_headers, read_rate_headers
from ..redaction import register_secret
from ..usage import Usage
from ._errors import error_from_response, error_from_stream_event
from ._pool import shared_transport
from ._sse import SSE, iter_sse
from .contract import Capabilities, Limits, ModelResponse, Tier


class Resend(Protocol):
    """What a request sends again after an error (`tiers.TierFallback`): the body to
    send, or None (the error stands)."""

    def next_body(self, body: dict[str, Any], error: ProviderError) -> dict[str, Any] | None: ...


__all__ = ["MALFORMED", "HTTPModel", "text_field"]

DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=10.0)
_LOOPBACK_HOSTS = ("localhost", "::1", "[::1]")
# Extra headers whose values are credentials (a gateway's own key header, say).
_SECRET_HEADER_WORDS = ("auth", "key", "token", "secret")
_SNIPPET_CHARS = 200


_VERSION = "0.1.0"
# What reading a reply of an unexpected shape raises (pydantic's ValidationError is a
# ValueError; json nesting too deep for the stack a RecursionError): each parse path
# turns these into a ProviderResponseError, so nothing a reply holds escapes untyped.
MALFORMED: tuple[type[Exception], ...] = (
    ValueError,
    KeyError,
    IndexError,
    TypeError,
    AttributeError,
    RecursionError,
)


_LARGE_BODY = 1 << 20


async def _chunks(content: bytes) -> AsyncIterator[bytes]:
    view = memoryview(content)
    for start in range(0, len(content), _LARGE_BODY):
        yield bytes(view[start : start + _LARGE_BODY])


def _timeout_extension(timeout: httpx.Timeout) -> dict[str, float | None]:
    return {
        "connect": timeout.connect,
        "read": timeout.read,
        "write": timeout.write,
        "pool": timeout.pool,
    }


def text_field(value: object) -> str:
    """A string field of a reply (TypeError otherwise: the reply is malformed)."""
    if not isinstance(value, str):
        raise TypeError(f"expected a string, not {type(value).__name__}")
    return value


def _timed_out(exc: httpx.TransportError) -> bool:
    """Whether a transport error is a timeout. httpx-aiohttp maps every aiohttp
    connection error (a refused connection, a failed DNS lookup, a server that hung up)
    to `httpx.ConnectTimeout`; what it wraps says what happened."""
    if not isinstance(exc, httpx.TimeoutException):
        return False
    cause = exc.__cause__
    return cause is None or isinstance(cause, TimeoutError)


def _leaves_machine(url: str) -> bool:
    host = httpx.URL(url).host
    return not (host in _LOOPBACK_HOSTS or host.startswith("127."))


def reading_of(response: httpx.Response | None) -> RateReading | None:
    """What a reply's rate-limit headers say (None: nothing, or no reply)."""
    if response is None:
        return None
    found = rate_headers(response.headers.multi_items())
    return read_rate_headers(found, time.time()) if found else None


def _rate_limit(settings: ModelSettings) -> RateLimit | None:
    """`rate_limit=`, with `requests_per_minute=` / `tokens_per_minute=` folded in (each
    dimension at the tightest said)."""
    limit = settings.get("rate_limit")
    rpm, tpm = settings.get("requests_per_minute"), settings.get("tokens_per_minute")
    if rpm is None and tpm is None:
        return limit
    short = RateLimit(requests_per_minute=rpm, tokens_per_minute=tpm)
    return short.tightest(limit) if limit is None else limit.tightest(short)


class ModelSettings(TypedDict, total=False):
    """What every HTTP model takes besides its name (defined once for all adapters)."""

    api_key: str | None
    base_url: str | None
    capabilities: Capabilities | None
    pricing: Pricing | None
    timeout: float | httpx.Timeout | None
    headers: Mapping[str, str] | None
    max_concurrency: int | None
    rate_limit: RateLimit | None
    requests_per_minute: float | None
    tokens_per_minute: float | None
    http_client: httpx.AsyncClient | None


class HTTPModel:
    """Base of the HTTP adapters.

    Requests go through one `httpx.AsyncClient` per event loop on httpx's aiohttp
    transport (measured: httpx's own pool burns ~15 ms CPU per request at 64 in flight),
    shared by all adapters; pass `http_client=` to use your own. The model is picklable
    (Ray ships it to workers). The API key never appears in repr, errors or logs.

    `max_concurrency` and `rate_limit` (a `RateLimit`: requests and tokens per minute,
    input and output apart) declare the provider limits that the model gateway (local:
    per process; Ray: cluster-wide) holds; `requests_per_minute=` and
    `tokens_per_minute=` are a shorter way to say a `RateLimit`. The concurrency is held
    per endpoint (provider, URL, key); a rate per `rate_key` (the endpoint and the model
    name: providers limit each model apart). With no rate configured, the rate and the
    concurrency are learnt from the replies' rate-limit headers and 429s. Models on one
    endpoint that declare different bounds: locally each request is held to its own
    model's; on Ray the tightest declaration in use holds.
    """

    provider: str = "http"
    env_key: str = ""
    default_base_url: str = ""
    # The settings this adapter takes (a TypedDict): any other is refused at construction.
    settings_type: ClassVar[type] = ModelSettings

    def __init__(self, name: str, **settings: Unpack[ModelSettings]) -> None:
        self._refuse_unknown(settings)
        self.name = name
        self.base_url = (settings.get("base_url") or self.default_base_url).rstrip("/")
        self.capabilities = settings.get("capabilities") or self.default_capabilities(name)
        self.pricing = settings.get("pricing")
        timeout = settings.get("timeout")
        self.timeout = DEFAULT_TIMEOUT if timeout is None else httpx.Timeout(timeout)
        self.extra_headers = dict(settings.get("headers") or {})
        self.max_concurrency = settings.get("max_concurrency", 64)
        self.rate_limit = _rate_limit(settings)
        api_key = settings.get("api_key")
        self._api_key = api_key if api_key is not None else os.environ.get(self.env_key, "")
        # A key is required unless the caller said none is needed: `api_key=None` given
        # on purpose, or a base URL of their own (a local server, a gateway).
        base_url = settings.get("base_url")
        self._key_required = "api_key" not in settings and (
            not base_url or base_url.rstrip("/") == self.default_base_url
        )
        self._injected_client = settings.get("http_client")
        self._urls: dict[str, httpx.URL] = {}
        self._headers: dict[str, str] | None = None
        self._timeouts = _timeout_extension(self.timeout)
        self._register_secrets()

    @classmethod
    def default_capabilities(cls, name: str) -> Capabilities:
        """What a model of this provider can do, by its name, unless told otherwise."""
        return Capabilities()

    def _refuse_unknown(self, settings: Mapping[str, Any]) -> None:
        """TypeError for a setting this adapter does not know (a misspelt one would be
        silently ignored), naming the closest it knows. The known names come from the
        settings TypedDict and the adapter's own keywords, so they cannot drift."""
        cls = type(self)
        typed = self.settings_type
        known = set(typed.__required_keys__) | set(typed.__optional_keys__)  # type: ignore[attr-defined]
        unknown = sorted(set(settings) - known)
        if not unknown:
            return
        own = inspect.signature(cls.__init__).parameters
        keywords = [n for n, p in own.items() if p.kind is p.KEYWORD_ONLY]
        choices = sorted(known | set(keywords))
        close = difflib.get_close_matches(unknown[0], choices, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TypeError(
            f"{cls.__name__}() got an unknown setting {unknown[0]!r}{hint}; it takes "
            + ", ".join(choices)
        )

    # -- identity -------------------------------------------------------------------

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, base_url={self.base_url!r})"

    @functools.cached_property
    def _remote(self) -> bool:
        # Parsed once per model, not on every request.
        return _leaves_machine(self.base_url)

    @functools.cached_property
    def key_fingerprint(self) -> str:
        """A short, one-way fingerprint of the API key (safe to log and to key gateways on)."""
        return hashlib.sha256(self._api_key.encode()).hexdigest()[:12]

    @property
    def endpoint(self) -> tuple[str, str, str]:
        """What a gateway bounds: (provider, base URL, key fingerprint)."""
        return (self.provider, self.base_url, self.key_fingerprint)

    @functools.cached_property
    def rate_key(self) -> tuple[str, str, str, str]:
        """What a rate is held under, as providers key it: (provider, base URL, key
        fingerprint, model name)."""
        return (self.provider, self.base_url, self.key_fingerprint, self.name)

    @property
    def requests_per_minute(self) -> float | None:
        """The configured requests per minute (`rate_limit`'s), or None."""
        return self.rate_limit.requests_per_minute if self.rate_limit else None

    @property
    def tokens_per_minute(self) -> float | None:
        """The configured tokens per minute (`rate_limit`'s), or None."""
        return self.rate_limit.tokens_per_minute if self.rate_limit else None

    # -- what the request path asks of it (`contract.ProviderModel`) -------------------

    service_tier: str | Tier | None = None  # an adapter with tiers sets its own

    def limits(self) -> Limits:
        """Its endpoint's bound and its rate, as one value (made once per model)."""
        limits: Limits | None = self.__dict__.get("_limits")
        if limits is None:
            limits = self.__dict__["_limits"] = Limits(
                self.endpoint, self.rate_key, self.max_concurrency, self.rate_limit
            )
        return limits

    def default_tier(self) -> str | Tier | None:
        return self.service_tier

    def declared_pricing(self) -> Pricing | None:
        return self.pricing

    def __getstate__(self) -> dict[str, Any]:
        # An injected client belongs to the process that made it.
        state = self.__dict__.copy()
        state["_injected_client"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._register_secrets()  # a copy in a Ray worker cleans that worker's errors

    def _register_secrets(self) -> None:
        for secret in self._secrets:
            register_secret(secret, self)

    # -- HTTP -------------------------------------------------------------------------

    def _auth_headers(self) -> dict[str, str]:
        raise NotImplementedError

    @property
    def _secrets(self) -> tuple[str, ...]:
        """The key and the values of credential-like extra headers: what a provider's
        reply is redacted of before anything of it reaches an error."""
        secret_headers = (
            value
            for name, value in self.extra_headers.items()
            if any(word in name.lower() for word in _SECRET_HEADER_WORDS)
        )
        return tuple(s for s in (self._api_key, *secret_headers) if s)

    @asynccontextmanager
    async def _post(
        self,
        path: str,
        body: dict[str, Any],
        signal: AbortSignal | None,
        headers: Mapping[str, str] | None = None,
        fallback: Resend | None = None,
    ) -> AsyncIterator[httpx.Response]:
        """POST `body` (with `headers` besides the model's own); yield the open response
        once its status is 2xx, else raise typed. `fallback`: a service tier refused for
        capacity is asked again at its fallback."""
        self._may_send()
        response = await self._send(self._json_request(path, body, headers), signal)
        try:
            while response.status_code >= 400:
                raw = await abortable(self._read(response), signal)
                error = error_from_response(
                    response, raw, provider=self.provider, secrets=self._secrets
                )
                again = None if fallback is None else fallback.next_body(body, error)
                if again is None:
                    raise error
                await response.aclose()
                body = again
                response = await self._send(self._json_request(path, body, headers), signal)
            yield response
        finally:
            await response.aclose()

    def _json_request(
        self, path: str, body: dict[str, Any], headers: Mapping[str, str] | None
    ) -> httpx.Request:
        return httpx.Request(
            "POST",
            self._url(path),
            content=pydantic_core.to_json(body),
            headers={**self._request_headers(), **headers} if headers else self._request_headers(),
            extensions={"timeout": self._timeouts},
        )

    def _may_send(self) -> None:
        """Raise before any I/O: no key where one is needed (said first: that is what
        the caller must fix), or offline mode and a URL that leaves the machine."""
        if self._key_required and not self._api_key:
            raise self._missing_key()
        if os.environ.get("RAYGENT_OFFLINE") and self._remote:
            # The guard tests run under: a real provider call fails loudly, before any I/O.
            raise OfflineError(
                f"RAYGENT_OFFLINE is set: refusing to call {self.base_url}", provider=self.provider
            )

    async def _send(self, request: httpx.Request, signal: AbortSignal | None) -> httpx.Response:
        """Send `request`, its reply open (streamed); a transport failure raised typed."""
        client = self._injected_client
        try:
            if client is not None:
                sending = client.send(request, stream=True)
            else:
                sending = (await shared_transport()).handle_async_request(request)
            return await abortable(sending, signal)
        except httpx.TransportError as exc:
            if _timed_out(exc):
                raise ProviderTimeoutError(
                    self._transport_text(exc), provider=self.provider
                ) from None
            raise ProviderConnectionError(
                self._connect_text(request.url, exc), provider=self.provider
            ) from None

    def _url(self, path: str) -> httpx.URL:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpx.URL(self.base_url + path)
        return url

    def _request_headers(self) -> dict[str, str]:
        if self._headers is None:
            self._headers = {
                "content-type": "application/json",
                "accept": "application/json",
                "user-agent": f"raygent/{_VERSION}",
                **self.extra_headers,
                **self._auth_headers(),
            }
        return self._headers

    def _missing_key(self) -> AuthenticationError:
        return AuthenticationError(
            f"{self.provider}: no API key: set {self.env_key} or pass api_key= to"
            f" {type(self).__name__} (api_key=None, or a base_url of your own, for a"
            " server that needs none)",
            provider=self.provider,
            status=None,
            provider_code="missing_api_key",
            env_key=self.env_key,
        )

    def _connect_text(self, url: httpx.URL, exc: Exception) -> str:
        """Which host could not be reached, and why (the OS's reason, not the client
        library's wording: aiohttp's says `ssl:default` even of a plain http:// URL)."""
        cause = exc.__cause__
        reason = getattr(cause, "os_error", None) or cause or exc
        detail = redact(str(reason), self._secrets) or type(reason).__name__
        port = url.port or (443 if url.scheme == "https" else 80)
        return f"{self.provider}: cannot connect to {url.host}:{port}: {detail}"

    def _transport_text(self, exc: Exception) -> str:
        detail = redact(str(exc), self._secrets) or type(exc).__name__
        return f"{self.provider}: {type(exc).__name__}: {detail}"

    async def _read(self, response: httpx.Response) -> bytes:
        try:
            return await response.aread()
        except httpx.TransportError as exc:
            if _timed_out(exc):
                raise ProviderTimeoutError(
                    self._transport_text(exc), provider=self.provider
                ) from None
            raise ProviderResponseError(
                f"{self.provider}: the reply broke off: {self._transport_text(exc)}",
                provider=self.provider,
            ) from None

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content: bytes | None = None,
        files: Mapping[str, tuple[str, bytes, str]] | None = None,
        form: Mapping[str, str] | None = None,
        signal: AbortSignal | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[bytes, httpx.Response]:
        """A request besides a model call (a batch API's files and jobs): the reply read
        whole; a status of 400 or more raises typed, as a model call's does. `body` is
        sent as JSON; `content`, JSON already encoded; `headers` go besides the model's."""
        self._may_send()
        headers = {**self._request_headers(), **(headers or {})}
        if files is not None:
            headers.pop("content-type")  # multipart: httpx sets it, with the boundary
            request = httpx.Request(
                method, self._url(path), files=files, data=form, headers=headers,
                extensions={"timeout": self._timeouts},
            )  # fmt: skip
        else:
            encoded = pydantic_core.to_json(body) if body is not None else content
            sent: bytes | AsyncIterator[bytes] | None = encoded
            if encoded is not None and len(encoded) > _LARGE_BODY:
                # A large body goes in chunks: sent whole, it would hold the loop.
                headers["content-length"] = str(len(encoded))
                sent = _chunks(encoded)
            request = httpx.Request(
                method, self._url(path), content=sent, headers=headers,
                extensions={"timeout": self._timeouts},
            )  # fmt: skip
        response = await self._send(request, signal)
        try:
            raw = await abortable(self._read(response), signal)
        finally:
            await response.aclose()
        if response.status_code >= 400:
            raise error_from_response(response, raw, provider=self.provider, secrets=self._secrets)
        return raw, response

    async def _call_json(
        self, method: str, path: str, body: Any = None, **kw: Any
    ) -> dict[str, Any]:
        raw, response = await self._call(method, path, body=body, **kw)
        try:
            data = pydantic_core.from_json(raw)
        except ValueError:
            raise self._bad_reply(response, "the reply is not JSON", raw) from None
        if not isinstance(data, dict):
            raise self._bad_reply(response, "the reply is not a JSON object", raw)
        return data

    def line_error(self, status: int, body: Any, request_id: str | None = None) -> ProviderError:
        """The typed error of a batch line the provider answered with `status` and `body`
        (as an online request answered so would raise)."""
        response = httpx.Response(
            status, headers={"x-request-id": request_id} if request_id else None
        )
        raw = body if isinstance(body, bytes) else pydantic_core.to_json(body)
        return error_from_response(response, raw, provider=self.provider, secrets=self._secrets)

    async def _post_json(
        self,
        path: str,
        body: dict[str, Any],
        signal: AbortSignal | None,
        headers: Mapping[str, str] | None = None,
        fallback: Resend | None = None,
    ) -> tuple[dict[str, Any], httpx.Response]:
        async with self._post(path, body, signal, headers, fallback) as response:
            raw = await abortable(self._read(response), signal)
        try:
            data = pydantic_core.from_json(raw)
        except ValueError:
            raise self._bad_reply(response, "the reply is not JSON", raw) from None
        if not isinstance(data, dict):
            raise self._bad_reply(response, "the reply is not a JSON object", raw)
        return data, response

    def _bad_reply(
        self, response: httpx.Response | None, why: str, raw: bytes = b""
    ) -> ProviderResponseError:
        # Redacted whole, then cut: a cut first could leave part of a key behind.
        snippet = redact(raw.decode("utf-8", "replace"), self._secrets)[:_SNIPPET_CHARS]
        return ProviderResponseError(
            f"{self.provider}: {why}" + (f": {snippet!r}" if snippet else ""),
            provider=self.provider,
            status=None if response is None else response.status_code,
        )

    async def _events(
        self, response: httpx.Response, signal: AbortSignal | None
    ) -> AsyncGenerator[SSE, None]:
        """The SSE events of a streamed response; a broken connection is a typed error."""
        events = iter_sse(response.aiter_bytes())
        with AbortWatch(signal) as watch:
            try:
                while True:
                    try:
                        event = await watch.until(anext(events))
                    except StopAsyncIteration:
                        return
                    except httpx.TransportError as exc:
                        if _timed_out(exc):
                            raise ProviderTimeoutError(
                                self._transport_text(exc), provider=self.provider
                            ) from None
                        raise ProviderResponseError(
                            f"{self.provider}: the stream broke off: {self._transport_text(exc)}",
                            provider=self.provider,
                        ) from None
                    yield event
            finally:
                # Closed here, not left to the loop's async-generator finaliser.
                await events.aclose()

    def _stream_error(self, data: dict[str, Any]) -> ProviderError:
        return error_from_stream_event(data, provider=self.provider, secrets=self._secrets)

    def _rated(self, reply: ModelResponse, response: httpx.Response | None) -> ModelResponse:
        """`reply` with what `response`'s rate-limit headers said (as it is if nothing)."""
        reading = reading_of(response)
        return reply if reading is None else reply.model_copy(update={"rate": reading})

    def _priced(self, usage: Usage, *, batch: bool = False, tier: str | None = None) -> Usage:
        return price_usage(
            usage,
            provider=self.provider,
            model=self.name,
            declared=self.pricing,
            batch=batch,
            tier=tier,
        )

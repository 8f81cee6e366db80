"""The skeleton every HTTP wire stands on: `HTTPModel`.

What every wire does per request is written here once: fill the call's options from the
model's settings, build the body, post it or stream it, map an error reply to a typed
error, read the rate-limit headers, parse the reply and its usage, price it, and
assemble a stream into its `Done`; so are the settings every adapter takes, its identity
(endpoint, rate key), its key's redaction, the provider-batch line's body and reply. An
adapter states only its wire, in the hooks `_wire` describes (the interface, with a
sketch of a new wire); the sending itself is `_transport`'s.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, ClassVar

import httpx
import pydantic_core
from typing_extensions import Unpack

from .._message_input import MessageLike, given_messages
from ..abort import AbortSignal, AbortWatch, abortable
from ..errors import (
    AbortedError,
    AuthenticationError,
    OfflineError,
    ProviderError,
    ProviderResponseError,
    redact,
)
from ..pricing import Pricing, price_usage
from ..rates.limits import RateReading
from ..redaction import register_secret
from ..usage import Usage
from ._errors import error_from_response, error_from_stream_event, parse_error_body
from ._settings import ModelSettings, rate_limit_of, refuse_unknown
from ._transport import Opened, Outgoing, send, timeouts_of
from ._wire import MALFORMED, ErrorEvent, Reply, StreamFeeder, Wire, json_object
from .contract import (
    Capabilities,
    Done,
    Limits,
    ModelOptions,
    ModelResponse,
    StreamChunk,
    Tier,
    UsageChunk,
)

__all__ = ["MALFORMED", "HTTPModel", "ModelSettings"]

DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=10.0)
_LOOPBACK_HOSTS = ("localhost", "::1", "[::1]")
# Extra headers whose values are credentials (a gateway's own key header, say).
_SECRET_HEADER_WORDS = ("auth", "key", "token", "secret")
_SNIPPET_CHARS = 200
_NO_OPTIONS = ModelOptions()
_NO_HEADERS: Mapping[str, str] = {}

_VERSION = "0.1.0"
# A prompt's tokens, estimated from its JSON as a rate's admission does (bytes over 4:
# `raygent.rates.estimate`, a part above this one).
_CHARS_PER_TOKEN = 4


def _not_sent_if_aborted(signal: AbortSignal | None) -> None:
    """Aborted before the request went: AbortedError with `sent=False` (nothing to bill)."""
    if signal is not None and signal.aborted:
        raise AbortedError(
            f"aborted: {signal.reason or 'no reason given'}", reason=signal.reason, sent=False
        )


def _leaves_machine(url: str) -> bool:
    host = httpx.URL(url).host
    return not (host in _LOOPBACK_HOSTS or host.startswith("127."))


class HTTPModel(Wire):
    """Base of the HTTP adapters: the per-request steps, written once; a subclass
    states its wire (the hooks of `raygent.models._wire.Wire`).

    Requests go straight to one aiohttp session per event loop, shared by all adapters
    (measured: httpx's own pool burns ~15 ms CPU per request at 64 in flight, and its
    Request/Response layer over aiohttp a quarter of a request's); pass `http_client=`
    (an `httpx.AsyncClient`) to send through your own. The model is picklable (Ray
    ships it to workers). The API key never appears in repr, errors or logs.

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
    # The variable the provider's own SDK reads a base URL from when none is given.
    env_base_url: str = ""
    default_base_url: str = ""
    # The settings this adapter takes (a TypedDict): any other is refused at construction.
    settings_type: ClassVar[type] = ModelSettings

    def __init__(self, name: str, **settings: Unpack[ModelSettings]) -> None:
        refuse_unknown(type(self), self.settings_type, settings)
        self.name = name
        base_url = settings.get("base_url") or (
            os.environ.get(self.env_base_url) if self.env_base_url else None
        )
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self.capabilities = settings.get("capabilities") or self.default_capabilities(name)
        self.pricing = settings.get("pricing")
        timeout = settings.get("timeout")
        self.timeout = DEFAULT_TIMEOUT if timeout is None else httpx.Timeout(timeout)
        self.extra_headers = dict(settings.get("headers") or {})
        self.max_concurrency = settings.get("max_concurrency", 64)
        self.rate_limit = rate_limit_of(settings)
        api_key = settings.get("api_key")
        self._api_key = api_key if api_key is not None else os.environ.get(self.env_key, "")
        # A key is required unless the caller said none is needed: `api_key=None` given
        # on purpose, or a base URL of their own (a local server, a gateway); or the wire
        # takes none (no `env_key`: its requests are signed, `sign`).
        self._key_required = (
            bool(self.env_key)
            and "api_key" not in settings
            and (not base_url or base_url.rstrip("/") == self.default_base_url)
        )
        self._injected_client = settings.get("http_client")
        self._urls: dict[str, str] = {}
        self._headers: dict[str, str] | None = None
        self._timeouts = timeouts_of(self.timeout)
        self._register_secrets()

    @classmethod
    def default_capabilities(cls, name: str) -> Capabilities:
        """What a model of this provider can do, by its name, unless told otherwise."""
        return Capabilities()

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

    def call_options(self, options: ModelOptions | None) -> ModelOptions:
        """The call's options, at the model's tier where the call asked for none (copied
        only then: most requests pass through untouched)."""
        options = options or _NO_OPTIONS
        if options.service_tier is None and self.service_tier is not None:
            return options.model_copy(update={"service_tier": self.service_tier})
        return options

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

    # -- the steps, written once ------------------------------------------------------

    def request_body(
        self, messages: Sequence[MessageLike], options: ModelOptions | None, *, stream: bool
    ) -> dict[str, Any]:
        """The JSON body this adapter sends (public so tests can check it against the SDK)."""
        return self.build_body(given_messages(messages), self.call_options(options), stream=stream)

    async def complete(
        self,
        messages: Sequence[MessageLike],
        options: ModelOptions | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> ModelResponse:
        filled = self.call_options(options)
        body = self.build_body(given_messages(messages), filled, stream=False)
        _not_sent_if_aborted(signal)
        try:
            # One abort registration for the whole request (the send and the read).
            return await abortable(self._complete(body), signal)
        except AbortedError as exc:
            raise self._cut_off(exc, body) from None

    async def _complete(self, body: dict[str, Any]) -> ModelResponse:
        opened = await self._open(self.request_path(stream=False), body)
        try:
            raw = await opened.read()
        finally:
            await opened.aclose()
        data = self._json(raw, opened.status)
        rate = self.rate_reading(opened.headers)
        tier = self.header_tier(opened.headers)
        return self._whole(data, opened.status, rate=rate, tier=tier)

    async def stream(
        self,
        messages: Sequence[MessageLike],
        options: ModelOptions | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> AsyncIterator[StreamChunk]:
        filled = self.call_options(options)
        body = self.build_body(given_messages(messages), filled, stream=True)
        feeder, decoder = self.stream_feeder(), self.stream_decoder()
        _not_sent_if_aborted(signal)
        try:
            with AbortWatch(signal) as watch:
                path = self.request_path(stream=True)
                opened = await watch.until(self._open(path, body))
                if feeder.service_tier is None:
                    feeder.service_tier = self.header_tier(opened.headers)
                try:
                    ended = False
                    while not ended:
                        chunk = await watch.until(opened.chunk())
                        if not chunk:
                            break
                        for event in decoder.feed(chunk):
                            if signal is not None:
                                signal.raise_if_aborted()  # aborted while a chunk was held
                            for out in self._fed(feeder, event, opened.status):
                                yield out
                            ended = feeder.ended
                            if ended:
                                break
                finally:
                    await opened.aclose()
        except AbortedError as exc:
            raise self._cut_off(exc, body) from None
        yield Done(self._assembled(feeder, opened))

    def batch_reply(self, data: dict[str, Any]) -> ModelResponse:
        """A batch line's reply body, read as `complete` reads one, priced at batch rates."""
        return self._whole(data, None, batch=True)

    def line_error(self, status: int, body: Any, request_id: str | None = None) -> ProviderError:
        """The typed error of a batch line the provider answered with `status` and `body`
        (as an online request answered so would raise)."""
        headers = {"x-request-id": request_id} if request_id else _NO_HEADERS
        data = parse_error_body(body) if isinstance(body, bytes) else body
        return self._error(status, headers, data)

    # -- the steps' parts -------------------------------------------------------------

    async def _open(self, path: str, body: dict[str, Any]) -> Opened:
        """POST `body`; the reply once its status is 2xx, else its error raised typed (a
        tier refused for capacity is sent again at its fallback by the access layer)."""
        self._may_send()
        opened = await self._send("POST", path, pydantic_core.to_json(body), body)
        if opened.status < 400:
            return opened
        try:
            raw = await opened.read()
        finally:
            await opened.aclose()
        raise self._error(opened.status, opened.headers, parse_error_body(raw), body)

    async def _send(
        self,
        method: str,
        path: str,
        content: bytes | None,
        body: dict[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Opened:
        sent = {**self._request_headers()}
        if body is not None and (needed := self.body_headers(body)):
            sent.update(needed)
        if headers:
            sent.update(headers)
        request = Outgoing(method, self._url(path), sent, content)
        await self.sign(request)
        return await send(
            request,
            self._timeouts,
            self._injected_client,
            provider=self.provider,
            secrets=self._secrets,
        )

    def _fed(self, feeder: StreamFeeder[Any], event: Any, status: int) -> list[StreamChunk]:
        """The chunks an event makes, a usage chunk priced; its error raised typed."""
        try:
            outs = feeder.feed(event)
        except ErrorEvent as said:
            raise self._event_error(said) from None
        except MALFORMED:
            raise self._bad_reply(status, "malformed stream event", event.data.encode()) from None
        for at, out in enumerate(outs):
            if type(out) is UsageChunk:
                outs[at] = UsageChunk(self._priced(out.usage, tier=feeder.service_tier))
        return outs

    def _assembled(self, feeder: StreamFeeder[Any], opened: Opened) -> ModelResponse:
        try:
            reply = feeder.reply()
        except MALFORMED:
            raise self._bad_reply(None, "malformed reply in the stream") from None
        if reply is None:
            raise self._bad_reply(None, "the stream ended before the reply was complete")
        try:
            return self._response(reply, rate=self.rate_reading(opened.headers))
        except MALFORMED:
            raise self._bad_reply(None, "malformed reply in the stream") from None

    def _whole(
        self,
        data: dict[str, Any],
        status: int | None,
        *,
        batch: bool = False,
        rate: RateReading | None = None,
        tier: str | None = None,
    ) -> ModelResponse:
        """A whole reply's JSON as the response it says, priced; typed if malformed.
        `tier`: the tier its headers named (the body's wins)."""
        try:
            reply = self.parse_reply(data)
            if reply.service_tier is None and tier is not None:
                reply.service_tier = tier
            return self._response(reply, batch=batch, rate=rate)
        except ErrorEvent as said:
            raise self._event_error(said) from None
        except MALFORMED:
            raw = pydantic_core.to_json(data, fallback=str)
            raise self._bad_reply(status, "malformed reply", raw) from None

    def _response(
        self,
        reply: Reply,
        *,
        batch: bool = False,
        rate: RateReading | None = None,
    ) -> ModelResponse:
        """The one place a reply becomes a `ModelResponse`: priced at the tier that
        served it (or at batch rates), with its rate reading."""
        return ModelResponse(
            content=reply.content,
            tool_calls=reply.tool_calls,
            finish_reason=reply.finish_reason,
            usage=self._priced(reply.usage, batch=batch, tier=reply.service_tier),
            response_id=reply.response_id,
            model=reply.model,
            provider=self.provider,
            refusal=reply.refusal,
            service_tier=reply.service_tier,
            iterations=reply.iterations,
            rate=rate,
        )

    def _cut_off(self, exc: AbortedError, body: dict[str, Any]) -> AbortedError:
        """`exc` with what a request cut off in flight is counted: it was sent, and a
        provider bills the prompt it began on (OpenAI and Anthropic alike), so one request
        and its input tokens, estimated as a rate's admission does (its JSON's bytes over
        4), priced at the model's input rate; what it may have generated is unknown."""
        if exc.usage is None and exc.details.get("sent", True):
            tokens = len(pydantic_core.to_json(body)) // _CHARS_PER_TOKEN + 1
            exc.usage = self._priced(Usage(requests=1, input_tokens=tokens))
        return exc

    def _priced(self, usage: Usage, *, batch: bool = False, tier: str | None = None) -> Usage:
        return price_usage(
            usage,
            provider=self.prices_as or self.provider,
            model=self.name,
            declared=self.pricing,
            batch=batch,
            tier=tier,
        )

    def _error(
        self,
        status: int,
        headers: Mapping[str, str],
        body: Any,
        sent: dict[str, Any] | None = None,
    ) -> ProviderError:
        typed = self.typed_error(status, headers, body, sent)
        if typed is not None:
            return typed
        said = self.error_said(body, headers)
        return error_from_response(
            status, headers, said, provider=self.provider, secrets=self._secrets
        )

    def _event_error(self, event: ErrorEvent) -> ProviderError:
        typed = self.typed_error(event.status, _NO_HEADERS, event.body, None)
        if typed is not None:
            return typed
        said = self.error_said(event.body, _NO_HEADERS)
        if event.status is not None:
            return error_from_response(
                event.status, _NO_HEADERS, said, provider=self.provider, secrets=self._secrets
            )
        return error_from_stream_event(said, provider=self.provider, secrets=self._secrets)

    def _json(self, raw: bytes, status: int | None) -> dict[str, Any]:
        try:
            return json_object(raw)
        except ValueError:
            raise self._bad_reply(status, "the reply is not JSON", raw) from None
        except TypeError:
            raise self._bad_reply(status, "the reply is not a JSON object", raw) from None

    def _bad_reply(self, status: int | None, why: str, raw: bytes = b"") -> ProviderResponseError:
        # Redacted whole, then cut: a cut first could leave part of a key behind.
        snippet = redact(raw.decode("utf-8", "replace"), self._secrets)[:_SNIPPET_CHARS]
        return ProviderResponseError(
            f"{self.provider}: {why}" + (f": {snippet!r}" if snippet else ""),
            provider=self.provider,
            status=status,
        )

    # -- HTTP -------------------------------------------------------------------------

    @functools.cached_property
    def _secrets(self) -> tuple[str, ...]:
        """The key and the values of credential-like extra headers: what a provider's
        reply is redacted of before anything of it reaches an error."""
        secret_headers = (
            value
            for name, value in self.extra_headers.items()
            if any(word in name.lower() for word in _SECRET_HEADER_WORDS)
        )
        return tuple(s for s in (self._api_key, *secret_headers) if s)

    def _may_send(self) -> None:
        """Raise before any I/O: no key where one is needed (said first: that is what
        the caller must fix), or offline mode and a URL that leaves the machine."""
        if self._key_required and not self._api_key:
            raise self._missing_key()
        # The guard tests run under: a real provider call fails loudly, before any I/O.
        # (The environment is read only for a remote URL: a loopback one never leaves.)
        if self._remote and os.environ.get("RAYGENT_OFFLINE"):
            raise OfflineError(
                f"RAYGENT_OFFLINE is set: refusing to call {self.base_url}", provider=self.provider
            )

    def _url(self, path: str) -> str:
        url = self._urls.get(path)
        if url is None:
            # A whole URL (another host of the provider's: an upload URL, a bucket) as is.
            whole = path.startswith(("https://", "http://"))
            url = path if whole else self._urls.setdefault(path, self.base_url + path)
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

    async def _post_json(
        self, path: str, body: dict[str, Any], signal: AbortSignal | None
    ) -> tuple[dict[str, Any], int]:
        """POST `body` to `path` besides the model call (e.g. counting tokens): its
        JSON reply and status, an error status raised typed."""
        return await abortable(self._posted_json(path, body), signal)

    async def _posted_json(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
        opened = await self._open(path, body)
        try:
            raw = await opened.read()
        finally:
            await opened.aclose()
        return self._json(raw, opened.status), opened.status

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
    ) -> tuple[bytes, Opened]:
        """A request besides a model call (a batch API's files and jobs): the reply read
        whole; a status of 400 or more raises typed, as a model call's does. `body` is
        sent as JSON; `content`, JSON already encoded; `files` (and `form`), as
        multipart; `headers` go besides the model's."""
        self._may_send()
        sent = dict(headers or {})
        if files is not None:
            # Encoded by httpx (its boundary in the content type), sent as bytes.
            multipart = httpx.Request(method, self._url(path), files=files, data=form)
            content = multipart.read()
            sent["content-type"] = multipart.headers["content-type"]
        elif body is not None:
            content = pydantic_core.to_json(body)
        return await abortable(self._called(method, path, content, sent), signal)

    async def _called(
        self, method: str, path: str, content: bytes | None, headers: Mapping[str, str]
    ) -> tuple[bytes, Opened]:
        opened = await self._send(method, path, content, headers=headers)
        try:
            raw = await opened.read()
        finally:
            await opened.aclose()
        if opened.status >= 400:
            raise self._error(opened.status, opened.headers, parse_error_body(raw))
        return raw, opened

    async def _call_json(
        self, method: str, path: str, body: Any = None, **kw: Any
    ) -> dict[str, Any]:
        raw, opened = await self._call(method, path, body=body, **kw)
        return self._json(raw, opened.status)

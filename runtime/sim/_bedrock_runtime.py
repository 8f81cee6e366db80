"""Bedrock's runtime endpoints: ``POST /model/{modelId}/converse`` and
``/converse-stream``, each request's signature checked (``_bedrock_auth``), then answered
as every wire is (rules, faults, rate limits, tiers, prompt cache, latency), and every
error made Bedrock's: the type in ``x-amzn-ErrorType``, the body ``{"message": ...}``.

A model id is a foundation model's (``anthropic.claude-...``), a cross-region inference
profile's (``us.anthropic.claude-...``) or an ARN (URL-encoded in the path, as boto3
sends it); the id as given is the request's model. Bedrock sends no rate-limit headers:
the simulator's are left out of its replies. A scripted error names its type with the
``x-amzn-ErrorType`` header of its fault or ``__type`` in its body (e.g.
``ModelNotReadyException`` with status 429); else the status says (429
``ThrottlingException``, 503 ``ServiceUnavailableException``, 400
``ValidationException``, 403 ``AccessDeniedException``, 404
``ResourceNotFoundException``, 408 ``ModelTimeoutException``, 424
``ModelErrorException``, other 5xx ``InternalServerException``).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Protocol
from urllib.parse import unquote

from aiohttp import web
from pydantic_core import from_json, to_json

from ._bedrock_auth import AuthRefusal, authenticate
from ._bedrock_converse import BedrockWire, error_type
from ._bedrock_parse import parse_converse
from ._config import SimConfig
from ._respond import Exchange
from ._stats import RecordedRequest, StatsRecorder, redact_headers
from ._types import ParsedRequest, Wire

BEDROCK = BedrockWire()
ERROR_TYPE_HEADER = "x-amzn-ErrorType"
_CORAL = ":http://internal.amazon.com/coral/com.amazon.bedrock/"
_THROTTLED = "Too many requests, please wait before trying again."
_MALFORMED = "Malformed input request, please reformat your input and try again."
# Headers of the simulator's rate limits and retry hints, which Bedrock does not send.
_NOT_BEDROCK = ("x-ratelimit-", "anthropic-ratelimit-", "retry-after", "x-should-retry")

_Serve = Callable[[web.Request, Wire, Exchange], Awaitable[web.StreamResponse]]
_Parse = Callable[[object], ParsedRequest]


class ChatCore(Protocol):
    """What the Bedrock routes use of the simulator's core (`_server.SimCore`)."""

    config: SimConfig
    stats: StatsRecorder

    def handler(
        self, wire: Wire, serve: _Serve
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]: ...

    async def chat(
        self, request: web.Request, wire: Wire, ex: Exchange, parse: _Parse | None = None
    ) -> web.StreamResponse: ...

    def next_request_id(self) -> str: ...


class BedrockRuntime:
    """The runtime routes of one simulator."""

    def __init__(self, core: ChatCore) -> None:
        self.core = core

    def add_routes(self, app: web.Application) -> None:
        converse = self.core.handler(BEDROCK, self._converse)
        app.router.add_post(r"/model/{modelId:.+}/converse", converse)
        app.router.add_post(r"/model/{modelId:.+}/converse-stream", converse)
        app.router.add_route("*", "/model/{tail:.*}", self._unknown)
        app.on_response_prepare.append(_strip_foreign_headers)

    async def _converse(self, request: web.Request, wire: Wire, ex: Exchange) -> web.StreamResponse:
        refused = await self._authenticate(request, ex)
        if refused is not None:
            return refused
        model = unquote(request.match_info["modelId"])
        stream = request.path.endswith("/converse-stream")
        parse = functools.partial(parse_converse, model=model, stream=stream)
        resp = await self.core.chat(request, wire, ex, parse)
        if isinstance(resp, web.Response) and resp.status >= 400:
            as_bedrock(resp)
        return resp

    async def _authenticate(self, request: web.Request, ex: Exchange) -> web.Response | None:
        """The 403 a request's credentials get (recorded as received), or None."""
        body = await request.read()
        signed = authenticate(request.method, request.host, request.raw_path, request.headers, body)
        key = self.core.config.api_key
        if not isinstance(signed, AuthRefusal) and key is not None and signed.key != key:
            signed = AuthRefusal(
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
            )
        if not isinstance(signed, AuthRefusal):
            return None
        try:
            parsed: Any = from_json(body) if body else None
        except ValueError:
            parsed = None
        headers = redact_headers(request.headers)
        record = RecordedRequest("bedrock", request.method, request.path, headers, parsed)
        self.core.stats.received(record)
        resp = ex.response(signed.status, to_json({"message": signed.message}))
        resp.headers[ERROR_TYPE_HEADER] = signed.error_type + _CORAL
        return resp

    async def _unknown(self, request: web.Request) -> web.Response:
        """Any other runtime path: Bedrock's 404 for an operation it does not know."""
        rid = self.core.next_request_id()
        headers = redact_headers(request.headers)
        self.core.stats.received(RecordedRequest(None, request.method, request.path, headers, None))
        self.core.stats.finished(404)
        return web.Response(
            status=404,
            body=to_json({"message": f"Unknown operation: {request.method} {request.path}"}),
            content_type="application/json",
            headers={
                ERROR_TYPE_HEADER: "UnknownOperationException",
                BEDROCK.request_id_header: rid,
            },
        )


def as_bedrock(resp: web.Response) -> None:
    """Make an error reply Bedrock's: ``{"message": ...}`` and its type in
    ``x-amzn-ErrorType`` (kept if the reply already names one)."""
    raw = resp.body if isinstance(resp.body, bytes) else b""
    try:
        body: Any = from_json(raw) if raw else None
    except ValueError:
        return  # a scripted body that is not JSON goes as it was scripted
    if not isinstance(body, dict):
        return
    kind = resp.headers.get(ERROR_TYPE_HEADER) or body.pop("__type", None)
    nested = body.get("error")
    message = body.get("message")
    if isinstance(nested, dict):  # a body the core made for every wire (rate limits)
        message = (
            _THROTTLED if nested.get("code") == "rate_limit_exceeded" else nested.get("message")
        )
    if isinstance(message, str) and message.startswith("We could not parse the JSON body"):
        kind, message = "SerializationException", _MALFORMED
    resp.body = to_json({"message": message or ""})
    if ERROR_TYPE_HEADER not in resp.headers:
        resp.headers[ERROR_TYPE_HEADER] = (kind or error_type(resp.status)) + _CORAL


async def _strip_foreign_headers(request: web.Request, resp: web.StreamResponse) -> None:
    if not request.path.startswith("/model/"):
        return
    for name in list(resp.headers):
        if name.lower().startswith(_NOT_BEDROCK):
            del resp.headers[name]

"""Where the simulator speaks Gemini: ``models/{model}:generateContent``,
``:streamGenerateContent`` (SSE with ``alt=sse``) and ``:countTokens`` on the Gemini API
(``/v1beta``) and on Vertex AI (``/{v1,v1beta1}/projects/{p}/locations/{l}/publishers/
google/models/{model}:...``, ``global`` included; ``/{v1,v1beta1}/publishers/google/
models/{model}:...`` with an API key in express mode), the batch mode and Files API of the
Gemini API, Vertex AI batch prediction over a minimal Cloud Storage JSON API, and
explicit context caches on both, and Google's OAuth token endpoint (``/token``) for
google-auth's default chain."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import web

from ._batch_common import BatchTimer, Core
from ._gemini_batches import GeminiBatches
from ._gemini_caches import GeminiCaches
from ._gemini_calls import VERSIONS, error_reply
from ._gemini_files import GeminiFiles
from ._gemini_gcs import GcsObjects
from ._gemini_vertex_batches import VertexBatches
from ._gemini_wire import GeminiWire
from ._google_oauth import GoogleOAuth
from ._respond import Exchange
from ._stats import RecordedRequest, redact_headers
from ._types import ParsedRequest, Wire

_CHAT = ("generateContent", "streamGenerateContent")
_VERTEX_TIER = "X-Vertex-AI-LLM-Shared-Request-Type"


class Exchanges(Core, Protocol):
    """What the routes use of the simulator's core: an exchange run by a serve function
    (`handler`), the chat one (`chat`), and a request read and checked (`receive`)."""

    def handler(
        self, wire: Wire, serve: Serve
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]: ...

    async def chat(self, request: web.Request, wire: Wire, ex: Exchange) -> web.StreamResponse: ...

    async def receive(self, ex: Exchange) -> ParsedRequest | web.Response: ...


Serve = Callable[[web.Request, Wire, Exchange], Awaitable[web.StreamResponse]]


class GeminiRoutes:
    """The Gemini endpoints of one simulator."""

    def __init__(self, core: Exchanges, timing: BatchTimer, enqueued_limit: int | None) -> None:
        self.core = core
        self.caches = GeminiCaches(core)
        self.files = GeminiFiles(core)
        self.batches = GeminiBatches(core, self.files, timing, enqueued_limit)
        self.gcs = GcsObjects(core)
        self.vertex_batches = VertexBatches(core, self.gcs, timing)
        self.oauth = GoogleOAuth()

    def add_routes(self, app: web.Application) -> None:
        for version in VERSIONS:
            app.router.add_post(f"/{version}/models/{{call}}", self._gemini)
        vertex = (
            "/{version}/projects/{project}/locations/{location}/publishers/google/models/{call}"
        )
        app.router.add_post(vertex, self._vertex)
        # Express mode: an API key, no project or location in the path.
        app.router.add_post("/{version}/publishers/google/models/{call}", self._vertex)
        self.caches.add_routes(app)
        self.files.add_routes(app)
        self.batches.add_routes(app)
        self.gcs.add_routes(app)
        self.vertex_batches.add_routes(app)
        self.oauth.add_routes(app)

    def reset(self) -> None:
        self.caches.clear()

    def close(self) -> None:
        self.batches.cancel_all()
        self.vertex_batches.cancel_all()

    async def _gemini(self, request: web.Request) -> web.StreamResponse:
        model, method = _split(request.match_info["call"])
        if method == "batchGenerateContent":
            return await self.batches.create_handler()(request)
        return await self._serve(request, model, method, vertex=False)

    async def _vertex(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["version"] not in ("v1", "v1beta1"):
            return await self._unknown(request)
        model, method = _split(request.match_info["call"])
        return await self._serve(request, model, method, vertex=True)

    async def _serve(
        self, request: web.Request, model: str, method: str, *, vertex: bool
    ) -> web.StreamResponse:
        if method not in (*_CHAT, "countTokens"):
            return await self._unknown(request)
        stream = method == "streamGenerateContent"
        if stream and request.query.get("alt") != "sse":
            # Without alt=sse Gemini streams one JSON array; only SSE is simulated.
            return await self._unknown(request, "streamGenerateContent is served with alt=sse.")
        wire = GeminiWire(
            model,
            stream=stream,
            vertex=vertex,
            query_key=request.query.get("key"),
            caches=self.caches.lookup,
            header_tier=request.headers.get(_VERTEX_TIER) if vertex else None,
            count=method == "countTokens",
        )
        serve = self._count if method == "countTokens" else self.core.chat
        return await self.core.handler(wire, serve)(request)

    async def _count(self, request: web.Request, wire: Wire, ex: Exchange) -> web.StreamResponse:
        req = await self.core.receive(ex)
        if isinstance(req, web.Response):
            return req
        assert isinstance(wire, GeminiWire)
        return ex.response(200, wire.count_body(req))

    async def _unknown(self, request: web.Request, message: str | None = None) -> web.Response:
        headers = redact_headers(request.headers)
        self.core.stats.received(
            RecordedRequest("gemini", request.method, request.path, headers, None)
        )
        self.core.stats.finished(404)
        return error_reply(404, message or f"Method not found: {request.path}.")


def _split(call: str) -> tuple[str, str]:
    model, _, method = call.rpartition(":")
    return model, method

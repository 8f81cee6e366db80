"""The aiohttp application: admission (auth, caps), rule choice, faults, latency and the
bookkeeping of stats. Runs on whatever loop calls :meth:`SimCore.start`."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from pydantic_core import from_json, to_json

from ._anthropic_batches import AnthropicBatches
from ._anthropic_messages import AnthropicWire
from ._batch_common import BatchTimer, JsonAnswer, Timing
from ._bedrock_jobs import BedrockJobs
from ._bedrock_runtime import BedrockRuntime
from ._compaction import check_beta
from ._config import SimConfig
from ._gemini_errors import quota_error, retry_error
from ._gemini_reply import tier_headers
from ._gemini_routes import GeminiRoutes
from ._openai_batches import OpenAIBatches
from ._openai_chat import OpenAIWire
from ._openai_responses import ResponsesWire
from ._plan import plan_reply
from ._rates import Admission, Cost, RateLimiter, error_body, retry_after
from ._respond import Exchange, fault_body, respond_plan, verbatim
from ._rules import RuleBook
from ._script import Fault, Reply, Script
from ._stats import RecordedRequest, StatsRecorder, redact_headers
from ._tiers import TierDesk
from ._tokens import PromptCache
from ._types import ParsedRequest, Plan, Wire, WireError

OPENAI = OpenAIWire()
ANTHROPIC = AnthropicWire()
RESPONSES = ResponsesWire()
# Requests carrying long prompts or base64 media must not hit aiohttp's 1 MiB default.
_MAX_BODY = 64 * 1024 * 1024
_NOT_JSON = (
    b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>"
)
_ERROR_FAULTS = frozenset({"status", "context_exceeded", "not_json"})
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_Serve = Callable[[web.Request, Wire, Exchange], Awaitable[web.StreamResponse]]


class SimCore:
    """The simulator's server and state; one per ``serve()``."""

    def __init__(self, script: Script, config: SimConfig) -> None:
        self.config = config
        self.stats = StatsRecorder()
        self.port = 0
        self._rules = RuleBook(script)
        self._faults = config.faults()
        self._cache = PromptCache()
        self._tiers = TierDesk(config.tiers)
        self._latency_rng = random.Random(config.latency.seed)
        self._fault_rng = random.Random(config.seed)
        self._request_ids = itertools.count(1)
        self._response_ids = itertools.count(1)
        self._rates = RateLimiter(config.rates())
        self._tasks: set[asyncio.Task[object]] = set()
        self._closing = False
        self._runner: web.AppRunner | None = None
        fixed = Timing(config.batch_seconds, config.batch_expire_after)
        timing = self._batch_timer = BatchTimer(fixed, config.batch_times)
        wires: dict[str, Wire] = {"/v1/chat/completions": OPENAI, "/v1/responses": RESPONSES}
        self.openai_batches = OpenAIBatches(self, wires, timing)
        self.anthropic_batches = AnthropicBatches(self, ANTHROPIC, timing)
        self.bedrock = BedrockRuntime(self)
        self.bedrock_jobs = BedrockJobs(self, timing, config.s3_endpoint_url)
        self.gemini = GeminiRoutes(self, timing, config.batch_enqueued_tokens)

    async def start(self) -> None:
        """Listen on the configured host and port; :attr:`port` is the real port."""
        self._closing = False
        app = web.Application(client_max_size=_MAX_BODY)
        app.router.add_post("/v1/chat/completions", self._handler(OPENAI, self._chat))
        app.router.add_post("/v1/responses", self._handler(RESPONSES, self._chat))
        app.router.add_post("/v1/messages", self._handler(ANTHROPIC, self._chat))
        app.router.add_post("/v1/messages/count_tokens", self._handler(ANTHROPIC, self._count))
        self.openai_batches.add_routes(app)
        self.anthropic_batches.add_routes(app)
        self.bedrock.add_routes(app)
        self.bedrock_jobs.add_routes(app)
        self.gemini.add_routes(app)
        app.router.add_get("/sim/stats", self._stats_endpoint)
        app.router.add_post("/sim/reset", self._reset_endpoint)
        app.router.add_get("/health", self._health)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        # handler_cancellation: a client going away cancels its handler (how a
        # disconnect during a latency sleep or a hang is noticed).
        runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0
        )
        await runner.setup()
        try:
            await web.TCPSite(runner, self.config.host, self.config.port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])

    async def close(self) -> None:
        """Stop listening and end every open exchange, hanging ones included."""
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        self.openai_batches.cancel_all()
        self.anthropic_batches.cancel_all()
        self.bedrock_jobs.cancel_all()
        self.gemini.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def reset(self) -> None:
        """Zero stats, records, rule counters and the prompt cache; reseed the RNGs.
        Call on the server's loop."""
        self.stats.reset()
        self._rules.reset()
        self._cache.clear()
        self._tiers.reset()
        self._batch_timer.reset()
        self._rates.reset()
        self.gemini.reset()
        self._latency_rng.seed(self.config.latency.seed)
        self._fault_rng.seed(self.config.seed)

    def _handler(self, wire: Wire, serve: _Serve) -> _Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self._exchange(request, wire, serve)

        return handle

    async def _exchange(self, request: web.Request, wire: Wire, run: _Serve) -> web.StreamResponse:
        """Run one API exchange and account for how it ended."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        ex = Exchange(request, wire, self._request_id())
        try:
            resp = await run(request, wire, ex)
        except asyncio.CancelledError:
            if ex.dropped:
                self.stats.finished(ex.status)
            elif not self._closing:
                self.stats.disconnected()
            raise
        finally:
            if ex.admitted:
                self.stats.released()
            self._tasks.discard(task)
        if ex.client_gone:
            if not self._closing:
                self.stats.disconnected()
        else:
            self.stats.finished(resp.status)
        return resp

    async def _receive(
        self, ex: Exchange, parse: Callable[[object], ParsedRequest] | None = None
    ) -> ParsedRequest | web.Response:
        """Read, record and check a request: its facts, or the error that answers it."""
        request, wire, rid = ex.request, ex.wire, ex.request_id
        raw = await request.read()
        try:
            body = from_json(raw) if raw else None
        except ValueError:
            body = None
        headers = redact_headers(request.headers)
        self.stats.received(RecordedRequest(wire.api, request.method, request.path, headers, body))
        key = self.config.api_key
        if key is not None and wire.api_key(request.headers) != key:
            return ex.response(401, wire.error(401, request_id=rid))  # as providers: auth first
        if body is None:
            return ex.response(400, wire.error(400, _invalid_json(wire), request_id=rid))
        try:
            if wire.api == "anthropic":
                check_beta(body, request.headers)  # a beta field needs its header
            return (parse or wire.parse)(body)
        except WireError as exc:
            status = exc.status
            body = wire.error(status, exc.message, request_id=rid, code=exc.code, param=exc.param)
            return ex.response(status, body)

    async def _chat(
        self,
        request: web.Request,
        wire: Wire,
        ex: Exchange,
        parse: Callable[[object], ParsedRequest] | None = None,
    ) -> web.StreamResponse:
        req = await self._receive(ex, parse)
        if isinstance(req, web.Response):
            return req
        refusal = self._context_refusal(wire, req, ex.request_id)
        if refusal is not None:  # refused before admission: charged nothing
            return ex.response(400, refusal)
        no_capacity = self._tiers.admit(wire, req, ex.request_id)
        if no_capacity is not None:  # flex without capacity: charged nothing either
            return ex.response(503 if wire.api == "gemini" else 429, no_capacity)
        refused = self._admit(ex, req)
        if refused is not None:
            return refused
        reply, fault = self._choose(req)
        return await self._answer(ex, req, reply, fault)

    # For wires with routes of their own (Bedrock's and Gemini's model id is in the path).
    handler = _handler
    chat = _chat
    receive = _receive

    def answer_json(self, wire: Wire, body: object) -> JsonAnswer:
        """What the online endpoint of `wire` would answer the JSON `body` with, answered
        at once and never streamed (for batch lines): the same parsing, context check,
        rules, scripted and rate-drawn faults and prompt cache, but no auth, caps or
        latency. A fault that yields no JSON answer (``not_json``, ``hang``,
        ``truncate``) gives ``body=None``."""
        rid = self._request_id()
        try:
            req = wire.parse(body)
        except WireError as exc:
            status = exc.status
            error = wire.error(status, exc.message, request_id=rid, code=exc.code, param=exc.param)
            return JsonAnswer(status, error, rid)
        req.stream = False
        req.served_tier = "batch" if wire.api == "anthropic" else "default"
        refusal = self._context_refusal(wire, req, rid)
        if refusal is not None:
            return JsonAnswer(400, refusal, rid)
        reply, fault = self._choose(req)
        if fault is not None and fault.kind in ("not_json", "hang", "truncate"):
            return JsonAnswer(502, None, rid)
        if fault is not None and fault.kind in _ERROR_FAULTS | {"stream_error"}:
            if fault.kind == "context_exceeded":
                return JsonAnswer(400, self._context_fault(wire, req, rid), rid)
            error = wire.error(fault.status, fault.message, request_id=rid)
            if fault.body is not None:
                error = verbatim(fault.body)
            return JsonAnswer(fault.status, error, rid)
        plan = self._plan(wire, req, reply, fault)
        response_id = wire.response_id_prefix + f"{next(self._response_ids):024x}"
        return JsonAnswer(200, wire.body(plan, req, response_id), rid)

    def _context_refusal(self, wire: Wire, req: ParsedRequest, rid: str) -> bytes | None:
        limit = self.config.context_window
        if limit is not None and req.input_tokens > limit:
            return wire.context_error(limit, req.input_tokens, request_id=rid)
        return None

    def _choose(self, req: ParsedRequest) -> tuple[Reply, Fault | None]:
        reply = self._rules.choose(req)
        drawn = self._rate_fault()  # drawn for every request: keeps the sequence seeded
        fault = reply.fault or drawn
        if fault is not None:
            self.stats.fault()
        return reply, fault

    def _plan(self, wire: Wire, req: ParsedRequest, reply: Reply, fault: Fault | None) -> Plan:
        read = self._cache.longest_hit(req.cache_candidates) if req.cache_candidates else 0
        if req.cache_writes:
            self._cache.store(req.cache_writes)
        return plan_reply(
            reply,
            req,
            id_prefix=wire.tool_id_prefix,
            fault=fault,
            cache_read=read,
            cache_write=max(req.cache_breakpoint_tokens - read, 0),
        )

    def _context_fault(self, wire: Wire, req: ParsedRequest, rid: str) -> bytes:
        limit = self.config.context_window or max(req.input_tokens - 1, 1)
        tokens = max(req.input_tokens, limit + 1)
        return wire.context_error(limit, tokens, request_id=rid)

    async def _answer(
        self, ex: Exchange, req: ParsedRequest, reply: Reply, fault: Fault | None
    ) -> web.StreamResponse:
        scale = self._tiers.latency(req)  # flex slower, priority faster
        ex.ttfb = self._ttfb_ms(reply) / 1000 * scale
        ex.per_token = self.config.latency.per_token_ms / 1000 * scale
        unstreamed_error = fault is not None and fault.kind == "stream_error" and not req.stream
        output = 0  # what the reply generated, to settle the output tokens charged
        try:
            if fault is not None and (fault.kind in _ERROR_FAULTS or unstreamed_error):
                await ex.sleep(ex.ttfb)
                return self._error_fault(ex, req, fault)
            plan = self._plan(ex.wire, req, reply, fault)
            output = plan.output_tokens
            if req.stream:
                self.stats.stream_started()
            return await respond_plan(ex, req, plan, fault, f"{next(self._response_ids):024x}")
        finally:
            if ex.admission is not None:
                ex.admission.settle(output)

    def _ttfb_ms(self, reply: Reply) -> float:
        if reply.latency_ms is not None:
            return reply.latency_ms
        latency = self.config.latency
        jitter = self._latency_rng.uniform(0, latency.jitter_ms) if latency.jitter_ms else 0.0
        return latency.fixed_ms + jitter

    def _error_fault(self, ex: Exchange, req: ParsedRequest, fault: Fault) -> web.Response:
        """The faults answered instead of a reply: an error status or a non-JSON body."""
        wire, rid = ex.wire, ex.request_id
        if fault.kind == "not_json":
            html = _NOT_JSON if fault.body is None else verbatim(fault.body)
            return ex.response(200, html, content_type="text/html", headers=fault.headers)
        if fault.kind == "context_exceeded":
            return ex.response(400, self._context_fault(wire, req, rid))
        kind = "text/plain" if isinstance(fault.body, str) else "application/json"
        return ex.response(
            fault.status,
            fault_body(fault, ex),
            content_type=kind,
            retry_after=fault.retry_after,
            headers=fault.headers,
        )

    def _admit(self, ex: Exchange, req: ParsedRequest) -> web.StreamResponse | None:
        """429 past a rate limit or the concurrency cap; else admit the request (charged
        to its key's buckets, counted in flight). Sets the reply's rate-limit headers."""
        config, wire, rid = self.config, ex.wire, ex.request_id
        key, model = wire.api_key(ex.request.headers) or "", req.model
        cached = 0
        if self._rates.counts_cache and req.cache_candidates and wire.api == "anthropic":
            cached = self._cache.longest_hit(req.cache_candidates)
        cost = Cost(req.input_tokens, req.max_tokens or 0, cached)
        now = time.monotonic()
        verdict = self._rates.admit(key, model, cost, now)
        if verdict is not None and not isinstance(verdict, Admission):
            ex.rate_headers = self._rate_headers(wire, req, key, now)
            self.stats.rate_limited(verdict.cause)
            if wire.api == "gemini":  # the delay is in the body (RetryInfo), not a header
                return ex.response(
                    429, quota_error(verdict, model, vertex="/projects/" in ex.request.path)
                )
            body = error_body(wire.api, verdict, model, rid)
            return ex.response(429, body, headers=retry_after(verdict))
        if not self.stats.try_admit(config.max_concurrency):
            if verdict is not None:
                verdict.refund()
            ex.rate_headers = self._rate_headers(wire, req, key, now)
            self.stats.rate_limited("concurrency")
            message = f"Too many concurrent requests (limit {config.max_concurrency})."
            if wire.api == "gemini":
                return ex.response(429, retry_error(message, config.retry_after))
            body = wire.error(429, message, request_id=rid)
            return ex.response(429, body, retry_after=config.retry_after)
        ex.admitted = True
        ex.admission = verdict
        ex.rate_headers = self._rate_headers(wire, req, key, now)
        self.stats.admitted(now, cost.input_tokens, cost.max_tokens)
        return None

    def _rate_headers(self, wire: Wire, req: ParsedRequest, key: str, now: float) -> dict[str, str]:
        """The headers every reply carries: the rate-limit headers (none from Google, who
        names the tier it served instead)."""
        if wire.api == "gemini":
            return tier_headers(req)
        return self._rates.headers(wire.api, key, req.model, now)

    def _request_id(self) -> str:
        return f"req_sim{next(self._request_ids):012x}"

    def next_request_id(self) -> str:
        """A fresh request id (for the batch APIs and their lines)."""
        return self._request_id()

    def _rate_fault(self) -> Fault | None:
        rate = self.config.fault_rate
        if rate <= 0 or self._fault_rng.random() >= rate:
            return None
        return self._faults[self._fault_rng.randrange(len(self._faults))]

    async def _count(self, request: web.Request, wire: Wire, ex: Exchange) -> web.StreamResponse:
        """Anthropic ``count_tokens``: the simulator's deterministic input count."""
        req = await self._receive(ex, _parse_for_count)
        if isinstance(req, web.Response):
            return req
        return ex.response(200, to_json({"input_tokens": req.input_tokens}))

    async def _stats_endpoint(self, request: web.Request) -> web.Response:
        body = self.stats.snapshot().model_dump_json()
        return web.Response(text=body, content_type="application/json")

    async def _reset_endpoint(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"ok": True})

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _not_found(self, request: web.Request) -> web.Response:
        method, path = request.method, request.path
        anthropic = path.startswith("/v1/messages") or "anthropic-version" in request.headers
        wire: Wire = ANTHROPIC if anthropic else OPENAI
        rid = self._request_id()
        headers = redact_headers(request.headers)
        self.stats.received(RecordedRequest(None, method, path, headers, None))
        message = "Not found" if anthropic else f"Invalid URL ({method} {path})"
        body = wire.error(404, message, request_id=rid)
        self.stats.finished(404)
        return web.Response(
            status=404,
            body=body,
            content_type="application/json",
            headers={wire.request_id_header: rid},
        )


def _parse_for_count(body: object) -> ParsedRequest:
    return ANTHROPIC.parse(body, require_max_tokens=False)


def _invalid_json(wire: Wire) -> str:
    if wire.api != "anthropic":
        return (
            "We could not parse the JSON body of your request. (HINT: This likely means you "
            "aren't using your HTTP library correctly. The OpenAI API expects a JSON payload.)"
        )
    return "There was an error parsing the body of your request as JSON."

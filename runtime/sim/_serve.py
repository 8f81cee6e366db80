"""``serve()``: the simulator on its own thread and event loop, as a context manager."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, TypeVar

from ._batch_times import BatchTimesLike, times_by_provider
from ._config import SimConfig
from ._rates import SimRateLimits
from ._script import Fault, FaultKind, Latency, ScriptLike, load_script
from ._server import SimCore
from ._stats import RecordedRequest, SimStats
from ._tiers import ServiceTiers

_T = TypeVar("_T")
_START_TIMEOUT = 30.0


class Simulator:
    """A running simulator (use :func:`serve`). Works as ``with`` and ``async with``;
    the server lives on its own thread, so a blocked caller loop is still served."""

    def __init__(self, core: SimCore) -> None:
        self._core = core
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://HOST:PORT``."""
        host = self._core.config.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self._core.port}"

    @property
    def openai_base_url(self) -> str:
        """``http://HOST:PORT/v1``: the ``base_url`` for ``openai.OpenAI``."""
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        """``http://HOST:PORT``: the ``base_url`` for ``anthropic.Anthropic``."""
        return self.url

    @property
    def gemini_base_url(self) -> str:
        """``http://HOST:PORT``: the ``base_url`` for ``google.genai``'s ``HttpOptions``
        (the Gemini API under ``/v1beta`` and ``/v1``, Vertex AI under
        ``/v1/projects/...`` and ``/v1beta1/projects/...``)."""
        return self.url

    @property
    def google_token_url(self) -> str:
        """``http://HOST:PORT/token``: Google's OAuth token endpoint, as the
        ``token_uri`` of a credentials file google-auth's default chain reads."""
        return self.url + "/token"

    @property
    def google_tokens(self) -> list[str]:
        """The access tokens the token endpoint has issued, oldest first."""
        return list(self._core.gemini.oauth.issued)

    @property
    def port(self) -> int:
        return self._core.port

    @property
    def requests(self) -> list[RecordedRequest]:
        """The last 1000 requests received, oldest first (credentials redacted)."""
        return self._core.stats.records()

    def stats(self) -> SimStats:
        """A snapshot of the counters; safe from any thread."""
        return self._core.stats.snapshot()

    async def wait_until(
        self, predicate: Callable[[SimStats], bool], timeout: float = 10.0
    ) -> SimStats:
        """Poll the stats until `predicate` holds (e.g. a disconnect was counted); raise
        AssertionError after `timeout` seconds. For tests: a bounded wait on a
        condition, not a sleep."""
        deadline = time.monotonic() + timeout
        while True:
            stats = self.stats()
            if predicate(stats):
                return stats
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not reached in {timeout:g}s; stats: {stats}")
            await asyncio.sleep(0.005)

    def reset(self) -> None:
        """Zero stats, recorded requests, rule fire counters and the prompt cache."""
        loop = self._loop
        if loop is None or self._thread is threading.current_thread():
            self._core.reset()
            return

        async def _reset() -> None:
            self._core.reset()

        self._submit(_reset()).result(timeout=_START_TIMEOUT)

    def start(self) -> None:
        """Start the server thread and wait until it listens."""
        started = self._launch()
        try:
            started.result(timeout=_START_TIMEOUT)
        except BaseException:
            self._stop_loop()
            raise

    def stop(self) -> None:
        """Close every connection and stop the thread."""
        if self._thread is None:
            return
        try:
            self._submit(self._core.close()).result(timeout=_START_TIMEOUT)
        finally:
            self._stop_loop()

    async def astart(self) -> None:
        """:meth:`start` without blocking the caller's loop while the server binds."""
        started = self._launch()
        try:
            await asyncio.wait_for(asyncio.wrap_future(started), _START_TIMEOUT)
        except BaseException:
            self._stop_loop()
            raise

    async def astop(self) -> None:
        """:meth:`stop` without blocking the caller's loop while connections close."""
        if self._thread is None:
            return
        try:
            await asyncio.wrap_future(self._submit(self._core.close()))
        finally:
            self._stop_loop()

    def _launch(self) -> concurrent.futures.Future[None]:
        if self._thread is not None:
            raise RuntimeError("the simulator is already running")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="raygent-sim", daemon=True)
        self._thread.start()
        return self._submit(self._core.start())

    def _run(self) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _submit(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _stop_loop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
        self._loop = None
        self._thread = None

    def __enter__(self) -> Simulator:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Simulator:
        await self.astart()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.astop()


def serve(
    script: ScriptLike = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    latency: Latency | None = None,
    max_concurrency: int | None = None,
    retry_after: float = 1.0,
    requests_per_minute: int | None = None,
    rate_limits: SimRateLimits | None = None,
    context_window: int | None = None,
    fault_rate: float = 0.0,
    fault_kinds: tuple[FaultKind | Fault, ...] = ("status",),
    seed: int = 0,
    api_key: str | None = None,
    batch_seconds: float = 0.0,
    batch_expire_after: int | None = None,
    batch_enqueued_tokens: int | None = None,
    batch_times: BatchTimesLike = None,
    tiers: ServiceTiers | None = None,
    s3_endpoint_url: str | None = None,
) -> Simulator:
    """A provider simulator speaking the OpenAI Chat Completions and Responses, Anthropic
    Messages and Gemini (Gemini API and Vertex AI) wires; enter it (``with`` /
    ``async with``) to run it.

    ``script``: a :class:`Script`, its dict/list form, or a YAML/JSON file path.
    ``max_concurrency``: over it, 429 with ``Retry-After: retry_after``.
    ``rate_limits``: a :class:`SimRateLimits` (requests, tokens, input and output tokens
    per minute), enforced per API key and model by continuously refilled buckets; past
    one, the provider's 429 with ``retry-after``; while any is set, every reply carries
    the provider's rate-limit headers. ``requests_per_minute``: short for
    ``rate_limits=SimRateLimits(requests_per_minute=...)``. ``context_window``: prompts
    over it get the provider's 400.
    ``fault_rate``: the probability that a request gets a fault drawn from
    ``fault_kinds`` (seeded by ``seed``). ``api_key``: if set, other keys get 401.

    The batch APIs: OpenAI's Files (``/v1/files``) and Batch (``/v1/batches``, for the
    ``/v1/chat/completions`` and ``/v1/responses`` endpoints) and Anthropic's Message
    Batches (``/v1/messages/batches``). Each batch line is answered as the online
    endpoint would answer it unstreamed (same rules, scripted and rate-drawn faults,
    context window; no caps or latency); error statuses become error lines, faults with
    no JSON answer (``not_json``, ``hang``, ``truncate``) a ``server_error`` line.
    ``batch_seconds``: how long a batch takes, its lines answered evenly over it (0:
    at once, in the background; a batch is never complete in its create response).
    ``batch_expire_after``: after that many answered lines a batch expires, the rest
    answered as expired (``None``: never). An OpenAI batch may override both with the
    metadata keys ``sim_batch_seconds`` and ``sim_expire_after``.
    ``batch_times``: how long batches take, drawn per batch (:class:`BatchTimes`: a
    seeded lognormal time to complete, a share of batches that stall, a completion
    window), for every provider or by provider (a mapping from ``"openai"``,
    ``"anthropic"``, ``"gemini"``, ``"vertex"``, ``"bedrock"``); a provider it does not
    name keeps ``batch_seconds``. An OpenAI batch's metadata ``sim_stall="1"`` stalls it.
    ``batch_enqueued_tokens``: the Gemini API's per-model quota of tokens enqueued in
    batches not yet done; a batch that would pass it is refused with 429.
    ``tiers``: how service tiers are served (:class:`ServiceTiers`: flex slower and
    sometimes refused for capacity, priority faster); every reply names its tier.

    Bedrock: ``/model/{modelId}/converse`` and ``converse-stream`` (each request's
    Signature V4 checked) and batch inference's model invocation jobs, whose records
    and outputs are S3 objects read and written through botocore at
    ``s3_endpoint_url`` (moto's server in tests; None: botocore's own configuration).
    """
    config = SimConfig(
        host=host,
        port=port,
        latency=latency or Latency(),
        max_concurrency=max_concurrency,
        retry_after=retry_after,
        requests_per_minute=requests_per_minute,
        rate_limits=rate_limits,
        context_window=context_window,
        fault_rate=fault_rate,
        fault_kinds=tuple(fault_kinds),
        seed=seed,
        api_key=api_key,
        batch_seconds=batch_seconds,
        batch_expire_after=batch_expire_after,
        batch_enqueued_tokens=batch_enqueued_tokens,
        batch_times=times_by_provider(batch_times),
        tiers=tiers or ServiceTiers(),
        s3_endpoint_url=s3_endpoint_url,
    )
    return Simulator(SimCore(load_script(script), config))

"""The model gateway: the process that sends an endpoint's requests, inside its limits.

`Gateway` is a plain class; `raygent.actors.gateway` makes it a named async Ray actor
(one per endpoint, or a few replicas that split the bound). It is also usable
in-process, which is how its limits are unit-tested.

Errors go back as values (a `RaygentError` returned or yielded, never raised) so that
callers get the typed error itself, not a `RayTaskError` wrapping it, and Ray does not
log an "error in task" for what is an ordinary provider reply.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pydantic_core

from ._core import (
    Done,
    Message,
    Model,
    ModelOptions,
    ModelResponse,
    RateLimitError,
    RaygentError,
    StreamChunk,
    Usage,
    closing_stream,
)
from ._limits import Pause, Slots, TokenBucket

__all__ = ["Gateway", "GatewayLimits", "RetryPolicy", "StreamBatching", "batches"]


@dataclass(frozen=True)
class RetryPolicy:
    """How a gateway retries 429s: at most `max_attempts` sends per request; a
    Retry-After over `max_wait` seconds is not waited for (the error goes back at once);
    without Retry-After, exponential backoff from `backoff` seconds, with jitter."""

    max_attempts: int = 8
    max_wait: float = 60.0
    backoff: float = 0.5

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, not {self.max_attempts}")


@dataclass(frozen=True)
class StreamBatching:
    """A streamed reply crosses to the caller in batches of up to `max_chunks` chunks or
    `linger` seconds, whichever comes first (the first chunk goes at once): one remote
    object per batch, never one per token."""

    max_chunks: int = 32
    linger: float = 0.02


@dataclass(frozen=True)
class GatewayLimits:
    """One gateway's share of an endpoint's limits (None: unbounded)."""

    max_concurrency: int | None = None
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    batching: StreamBatching = field(default_factory=StreamBatching)


class Gateway:
    """Sends requests for the models it is handed (models are picklable; each call
    brings its own) within the concurrency bound, the rate buckets and the shared
    Retry-After pause, retrying 429s."""

    def __init__(self, limits: GatewayLimits) -> None:
        self.limits = limits
        self._slots = Slots(limits.max_concurrency)
        self._pause = Pause()
        rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
        self._requests = TokenBucket(rpm) if rpm else None
        self._tokens = TokenBucket(tpm) if tpm else None

    def stats(self) -> dict[str, float]:
        """The current state of the limits (for tests and debugging)."""
        return {
            "in_use": self._slots.in_use,
            "limit": self._slots.limit,
            "paused_for": max(0.0, self._pause.until - time.monotonic()),
        }

    async def complete(
        self, model: Model, messages: Sequence[Message], options: ModelOptions
    ) -> ModelResponse | RaygentError:
        estimate = self._estimate(messages, options)
        for attempt in range(1, self.limits.retry.max_attempts + 1):
            try:
                async with self._admitted(estimate):
                    response = await model.complete(messages, options)
            except RateLimitError as exc:
                if not await self._backed_off(exc, attempt, estimate):
                    return exc
                continue
            except RaygentError as exc:
                return exc
            self._succeeded(estimate, response.usage)
            return response
        raise AssertionError("unreachable: the last attempt returns")

    async def stream(
        self, model: Model, messages: Sequence[Message], options: ModelOptions
    ) -> AsyncIterator[list[StreamChunk] | RaygentError]:
        """Batches of chunks; an error is the last item. A 429 is retried only before
        anything was sent (afterwards the caller has seen part of a reply)."""
        estimate = self._estimate(messages, options)
        for attempt in range(1, self.limits.retry.max_attempts + 1):
            sent = False
            try:
                async with self._admitted(estimate):
                    chunks = model.stream(messages, options)
                    async with closing_stream(chunks):
                        async for batch in batches(chunks, self.limits.batching):
                            sent = True
                            yield batch
                            last = batch[-1]
                            if isinstance(last, Done):
                                self._succeeded(estimate, last.response.usage)
                return
            except RateLimitError as exc:
                if sent or not await self._backed_off(exc, attempt, estimate):
                    yield exc
                    return
            except RaygentError as exc:
                yield exc
                return

    # -- limits ---------------------------------------------------------------------

    @asynccontextmanager
    async def _admitted(self, estimate: int) -> AsyncIterator[None]:
        await self._pause.wait()
        if self._requests is not None:
            await self._requests.take(1)
        if self._tokens is not None:
            await self._tokens.take(estimate)
        await self._slots.acquire()
        try:
            # A Retry-After may have come back while this request queued for a slot.
            await self._pause.wait()
            yield
        finally:
            self._slots.release()

    async def _backed_off(self, exc: RateLimitError, attempt: int, estimate: int) -> bool:
        """Wait before the next attempt; False if there should be none."""
        if self._tokens is not None:
            self._tokens.settle(estimate, 0)  # the provider did not count a rejected request
        self._slots.shrink()
        retry = self.limits.retry
        retry_after = exc.details.get("retry_after")
        if isinstance(retry_after, (int, float)):
            if retry_after > retry.max_wait:
                return False  # not worth holding anyone for: the error goes back now
            self._pause.push(float(retry_after))  # everyone waits, this request included
        if attempt >= retry.max_attempts:
            return False
        if isinstance(retry_after, (int, float)):
            return True
        delay = min(retry.max_wait, retry.backoff * 2 ** (attempt - 1))
        await asyncio.sleep(delay * random.uniform(0.5, 1.0))
        return True

    def _succeeded(self, estimate: int, usage: Usage) -> None:
        self._slots.grow()
        if self._tokens is not None:
            self._tokens.settle(estimate, usage.total_tokens)

    def _estimate(self, messages: Sequence[Message], options: ModelOptions) -> int:
        """Tokens a request may use, before it is sent: ~4 bytes of JSON a token for the
        prompt, plus the output cap. Corrected with the real usage afterwards."""
        if self._tokens is None:
            return 0
        prompt = len(pydantic_core.to_json(list(messages))) // 4
        return prompt + (options.max_tokens or 0)


async def batches(
    chunks: AsyncIterator[StreamChunk], batching: StreamBatching
) -> AsyncIterator[list[StreamChunk]]:
    """Group `chunks` into lists: the first chunk alone, then up to `max_chunks` or
    `linger` seconds' worth; `Done` always closes a batch. One reader task pulls the
    chunks; closing this generator cancels it (and so the HTTP request)."""
    loop = asyncio.get_running_loop()
    buffer: list[StreamChunk] = []
    ready = asyncio.Event()
    ended = False
    failure: BaseException | None = None
    timer: asyncio.TimerHandle | None = None
    first = True

    async def read() -> None:
        nonlocal ended, failure, timer
        try:
            async for chunk in chunks:
                buffer.append(chunk)
                if first or len(buffer) >= batching.max_chunks or isinstance(chunk, Done):
                    ready.set()
                elif timer is None:
                    timer = loop.call_later(batching.linger, ready.set)
        except Exception as exc:
            failure = exc
        finally:
            ended = True
            ready.set()

    reader = asyncio.ensure_future(read())
    try:
        while True:
            if not ended:
                await ready.wait()
            ready.clear()
            if timer is not None:
                timer.cancel()
                timer = None
            if buffer:
                batch = buffer[: batching.max_chunks]
                del buffer[: batching.max_chunks]
                if buffer:
                    ready.set()  # more arrived meanwhile: it has waited long enough
                first = False
                yield batch
            elif ended:
                break
        if failure is not None:
            raise failure
    finally:
        if timer is not None:
            timer.cancel()
        if not reader.done():
            reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)

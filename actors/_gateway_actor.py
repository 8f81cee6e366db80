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
from typing import Any

import pydantic_core

from ._core import (
    Cost,
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

__all__ = [
    "Gateway",
    "GatewayLimits",
    "RetryPolicy",
    "Send",
    "Sends",
    "StreamBatching",
    "batches",
]


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


@dataclass
class Send:
    """One send of a request: how long it waited to be admitted (`queued`: the shared
    pause, the rate buckets, a slot), how long the provider took, how it ended, and the
    wait the gateway chose before the next send."""

    number: int
    started: float = field(default_factory=time.perf_counter)
    sent: float | None = None
    ended: float | None = None
    error: RaygentError | None = None
    wait: float | None = None

    def admitted(self) -> None:
        self.sent = time.perf_counter()

    def failed(self, error: RaygentError) -> None:
        self.ended, self.error = time.perf_counter(), error

    def record(self, model: Model) -> dict[str, Any]:
        """The trip report's entry: the keys of a fallback's failed attempt (model,
        provider, error) and the send's own facts."""
        ended = self.ended if self.ended is not None else time.perf_counter()
        sent = self.sent if self.sent is not None else ended
        error = self.error
        return {
            "model": model.name,
            "provider": model.provider,
            "error": None if error is None else error.to_dict(),
            "attempt": self.number,
            "ok": error is None,
            "status": None if error is None else error.details.get("status"),
            "code": None if error is None else error.code,
            "retry_after": None if error is None else error.details.get("retry_after"),
            "wait": self.wait,
            "queued": round(sent - self.started, 6),
            "duration": round(ended - sent, 6),
        }


class Sends:
    """The sends of one request through a gateway.

    A request answered at its first send is left as it is (as on the local backend,
    `attempts` stays empty). One the gateway sent again (429s retried) lists every send
    on the response's `attempts`, the failed ones first, the one that answered last; the
    failed sends count as requests at no cost, as a fallback model counts its failed
    attempts. A request the gateway gives up on carries `attempts` (how many sends) in
    its error's details.
    """

    def __init__(self, model: Model) -> None:
        self.model = model
        self.sends: list[Send] = []

    def start(self) -> Send:
        send = Send(len(self.sends) + 1)
        self.sends.append(send)
        return send

    def answered(self, response: ModelResponse) -> ModelResponse:
        if len(self.sends) < 2:
            return response
        self.sends[-1].ended = time.perf_counter()
        attempts = [send.record(self.model) for send in self.sends]
        failed = len(self.sends) - 1
        usage = (
            response.usage + Usage(requests=failed, cost=Cost())
            if response.usage.cost is not None
            else response.usage.model_copy(update={"requests": response.usage.requests + failed})
        )
        return response.model_copy(
            update={"attempts": [*attempts, *response.attempts], "usage": usage}
        )

    def gave_up(self, error: RaygentError) -> RaygentError:
        if len(self.sends) > 1:
            error.details["attempts"] = len(self.sends)
        return error


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
        self, model: Model, messages: Sequence[Message], options: ModelOptions, retries: bool = True
    ) -> ModelResponse | RaygentError:
        """`retries=False`: a 429 goes back at once (a fallback with a next model to try);
        its Retry-After still pauses everyone else."""
        estimate = self._estimate(messages, options)
        sends = Sends(model)
        most = self.limits.retry.max_attempts if retries else 1
        for attempt in range(1, most + 1):
            send = sends.start()
            try:
                async with self._admitted(estimate):
                    send.admitted()
                    response = await model.complete(messages, options)
            except RateLimitError as exc:
                send.failed(exc)
                if not await self._backed_off(exc, attempt, most, estimate, send):
                    return sends.gave_up(exc)
                continue
            except RaygentError as exc:
                send.failed(exc)
                return sends.gave_up(exc)
            self._succeeded(estimate, response.usage)
            return sends.answered(response)
        raise AssertionError("unreachable: the last attempt returns")

    async def stream(
        self, model: Model, messages: Sequence[Message], options: ModelOptions, retries: bool = True
    ) -> AsyncIterator[list[StreamChunk] | RaygentError]:
        """Batches of chunks; an error is the last item. A 429 is retried only before
        anything was sent (afterwards the caller has seen part of a reply), and not at
        all with `retries=False`."""
        estimate = self._estimate(messages, options)
        sends = Sends(model)
        most = self.limits.retry.max_attempts if retries else 1
        for attempt in range(1, most + 1):
            sent = False
            send = sends.start()
            try:
                async with self._admitted(estimate):
                    send.admitted()
                    chunks = model.stream(messages, options)
                    async with closing_stream(chunks):
                        async for batch in batches(chunks, self.limits.batching):
                            sent = True
                            last = batch[-1]
                            if isinstance(last, Done):
                                self._succeeded(estimate, last.response.usage)
                                batch[-1] = Done(sends.answered(last.response))
                            yield batch
                return
            except RateLimitError as exc:
                send.failed(exc)
                if sent or not await self._backed_off(exc, attempt, most, estimate, send):
                    yield sends.gave_up(exc)
                    return
            except RaygentError as exc:
                send.failed(exc)
                yield sends.gave_up(exc)
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

    async def _backed_off(
        self, exc: RateLimitError, attempt: int, most: int, estimate: int, send: Send
    ) -> bool:
        """Wait before the next attempt (noted on `send`); False if there should be none."""
        if self._tokens is not None:
            self._tokens.settle(estimate, 0)  # the provider did not count a rejected request
        self._slots.shrink()
        retry = self.limits.retry
        retry_after = exc.details.get("retry_after")
        if isinstance(retry_after, (int, float)):
            if retry_after > retry.max_wait:
                return False  # not worth holding anyone for: the error goes back now
            self._pause.push(float(retry_after))  # everyone waits, this request included
        if attempt >= most:
            return False
        if isinstance(retry_after, (int, float)):
            send.wait = float(retry_after)  # in the pause, before the next admission
            return True
        send.wait = min(retry.max_wait, retry.backoff * 2 ** (attempt - 1))
        send.wait *= random.uniform(0.5, 1.0)
        await asyncio.sleep(send.wait)
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

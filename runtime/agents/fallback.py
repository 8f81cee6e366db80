"""`fallback_model([m1, m2, ...])`: fail over to the next model on transient errors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, cast

from ..abort import AbortSignal
from ..errors import (
    ProviderConnectionError,
    ProviderError,
    ProviderResponseError,
    ProviderTimeoutError,
    RateLimitError,
    ServerError,
    redact,
)
from ..messages import Message
from ..models.contract import Capabilities, Done, Model, ModelOptions, ModelResponse, StreamChunk
from ..seams.contract import ModelAccess
from ..seams.local import closing_stream
from ..usage import Cost, Usage

__all__ = ["FallbackModel", "fallback_model"]

TRANSIENT: tuple[type[BaseException], ...] = (
    RateLimitError,
    ProviderTimeoutError,
    ProviderConnectionError,
    ServerError,
)
_NO_OPTIONS = ModelOptions()
RetryOn = tuple[type[BaseException], ...] | Callable[[BaseException], bool]


def fallback_model(models: Sequence[Model], *, retry_on: RetryOn | None = None) -> FallbackModel:
    """A model that tries `models` in order, moving on when one fails with an error that
    `retry_on` accepts (default: rate limits, timeouts, connection errors, 5xx). A stream
    fails over only before its first chunk. Failed attempts are listed on the response's
    `attempts` and counted in its usage (as requests, at no cost)."""
    return FallbackModel(models, retry_on=retry_on)


class FallbackModel:
    def __init__(self, models: Sequence[Model], *, retry_on: RetryOn | None = None) -> None:
        if not models:
            raise ValueError("fallback_model needs at least one model")
        self.models = list(models)
        self.retry_on: RetryOn = TRANSIENT if retry_on is None else retry_on
        self._access: ModelAccess | None = None

    @property
    def name(self) -> str:
        return self.models[0].name

    @property
    def provider(self) -> str:
        return self.models[0].provider

    @property
    def capabilities(self) -> Capabilities:
        # Only what every model can do, so no option is sent to a model that lacks it.
        fields = Capabilities.model_fields
        return Capabilities(
            **{f: all(getattr(m.capabilities, f) for m in self.models) for f in fields}
        )

    def through(self, access: ModelAccess) -> FallbackModel:
        """This fallback, sending each attempt through `access` (a run's request path:
        its outermost link splits a fallback here), so that every model's cache entry,
        budget reservation and provider bounds hold as if it were used on its own."""
        routed = FallbackModel(self.models, retry_on=self.retry_on)
        routed._access = access
        return routed

    def _via(self, position: int) -> ModelAccess:
        """The access for the model at `position`: one with a model after it fails fast
        where the access would otherwise retry a 429 itself (Ray's gateways), so that
        the fallback gets to fail over, as it does in-process."""
        access = self._access
        assert access is not None
        fast = getattr(access, "failing_fast", None)
        if position < len(self.models) - 1 and callable(fast):
            return cast("ModelAccess", fast())
        return access

    def _fails_over(self, error: BaseException) -> bool:
        if callable(self.retry_on) and not isinstance(self.retry_on, tuple):
            return bool(self.retry_on(error))
        return isinstance(error, self.retry_on)

    async def complete(
        self,
        messages: Sequence[Message],
        options: ModelOptions | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> ModelResponse:
        attempts: list[dict[str, Any]] = []
        for position, model in enumerate(self.models):
            try:
                if self._access is None:
                    response = await model.complete(messages, options, signal=signal)
                else:
                    response = await self._via(position).complete(
                        model, messages, options or _NO_OPTIONS, signal
                    )
            except Exception as error:
                if position == len(self.models) - 1 or not self._fails_over(error):
                    raise
                attempts.append(_attempt(model, error))
                continue
            return _with_attempts(response, attempts)
        raise AssertionError("unreachable")

    async def stream(
        self,
        messages: Sequence[Message],
        options: ModelOptions | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> AsyncIterator[StreamChunk]:
        attempts: list[dict[str, Any]] = []
        for position, model in enumerate(self.models):
            if self._access is None:
                chunks = model.stream(messages, options, signal=signal)
            else:
                chunks = self._via(position).stream(model, messages, options or _NO_OPTIONS, signal)
            async with closing_stream(chunks):
                try:
                    first = await anext(chunks)
                except StopAsyncIteration:
                    raise ProviderResponseError(
                        f"{model.name}: the stream ended before any reply", provider=model.provider
                    ) from None
                except Exception as error:
                    if position == len(self.models) - 1 or not self._fails_over(error):
                        raise
                    attempts.append(_attempt(model, error))
                    continue
                # Past the first chunk the reply is under way: no more failing over.
                yield _stamped(first, attempts)
                async for chunk in chunks:
                    yield _stamped(chunk, attempts)
            return


def _stamped(chunk: StreamChunk, attempts: list[dict[str, Any]]) -> StreamChunk:
    return Done(_with_attempts(chunk.response, attempts)) if isinstance(chunk, Done) else chunk


def _attempt(model: Model, error: BaseException) -> dict[str, Any]:
    info = error.to_dict() if isinstance(error, ProviderError) else {"message": redact(repr(error))}
    return {"model": model.name, "provider": model.provider, "error": info}


def _with_attempts(response: ModelResponse, attempts: list[dict[str, Any]]) -> ModelResponse:
    if not attempts:
        return response
    # A failed request is a request, billed at nothing.
    failed = Usage(requests=len(attempts), cost=Cost())
    usage = (
        response.usage + failed
        if response.usage.cost is not None
        else response.usage.model_copy(update={"requests": response.usage.requests + len(attempts)})
    )
    return response.model_copy(update={"attempts": [*attempts, *response.attempts], "usage": usage})

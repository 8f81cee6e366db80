"""`fallback_model([m1, m2, ...])`: fail over to the next model on transient errors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence

from ..abort import AbortSignal
from ..errors import (
    ProviderConnectionError,
    ProviderTimeoutError,
    RateLimitError,
    ServerError,
)
from ..messages import Message
from ..models.contract import Capabilities, Model, ModelOptions, ModelResponse, StreamChunk
from ..seams.link import DIRECT
from ..seams.request import ModelRequest

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
    """A `CompositeModel`: a request path (`raygent.seams.Link`) splits it once, sending
    each of its models' attempts as a request of its own; used on its own, it sends to
    its models directly."""

    def __init__(self, models: Sequence[Model], *, retry_on: RetryOn | None = None) -> None:
        if not models:
            raise ValueError("fallback_model needs at least one model")
        self.models = list(models)
        self.retry_on: RetryOn = TRANSIENT if retry_on is None else retry_on

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

    def parts(self) -> Sequence[Model]:
        return self.models

    def fails_over(self, error: BaseException) -> bool:
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
        return await DIRECT.complete(ModelRequest(self, messages, options or _NO_OPTIONS, signal))

    def stream(
        self,
        messages: Sequence[Message],
        options: ModelOptions | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> AsyncIterator[StreamChunk]:
        return DIRECT.stream(ModelRequest(self, messages, options or _NO_OPTIONS, signal))

"""Model access under budgets: each request reserves its worst case in every ledger of
its run before it is sent, and settles at its real usage after.

`budgeted(backend, ledgers)` is the backend a run with budgets runs on: its model access
wraps the backend's, so every request of the run is held (its trips, a compaction's
summaries, each attempt of a fallback model at that model's own prices), whatever the
backend, and a request that is never sent (a cached reply, a middleware's) costs nothing.

`held_ledgers` carries a run's ledgers into the tools it calls: an agent run as a tool
(a nested run, in the caller's process) is held to its parent's budgets besides its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from contextvars import ContextVar
from typing import Any

from ..abort import AbortSignal
from ..errors import InvalidOptionsError, ProviderError
from ..messages import Message
from ..models.contract import Done, Model, ModelOptions, ModelResponse, StreamChunk
from ..spend import NOTHING, Amount, Ledger, amount_of, worst_case
from .contract import Backend, ModelAccess
from .local import closing_stream, routed

__all__ = ["BudgetedAccess", "budgeted", "held_ledgers", "ledgers_of"]

# The ledgers of the run whose tool is running (set around each tool call).
held_ledgers: ContextVar[tuple[Ledger, ...]] = ContextVar("raygent_held_ledgers", default=())


def budgeted(backend: Backend, ledgers: Sequence[Ledger]) -> Backend:
    """`backend` with its model access held to `ledgers` (itself when there are none)."""
    if not ledgers:
        return backend
    models = BudgetedAccess(backend.models, tuple(ledgers))
    return dataclasses.replace(backend, models=models)


def ledgers_of(backend: Backend) -> tuple[Ledger, ...]:
    """The ledgers a run on `backend` (made by `budgeted`) is held to."""
    models = backend.models
    return models.ledgers if isinstance(models, BudgetedAccess) else ()


class _Hold:
    """One request's reservation in each ledger."""

    __slots__ = ("amount", "ledgers")

    def __init__(self, ledgers: tuple[Ledger, ...], amount: Amount) -> None:
        self.ledgers, self.amount = ledgers, amount

    def settle(self, actual: Amount) -> None:
        for ledger in self.ledgers:
            ledger.settle(self.amount, actual)

    def failed(self, error: BaseException) -> None:
        """A provider's error reply was not billed; anything else (cut off, cancelled,
        timed out) may have been: it is charged its whole reservation."""
        if isinstance(error, ProviderError) and error.details.get("status") is not None:
            self.settle(NOTHING)
        else:
            self.settle(self.amount)


class BudgetedAccess:
    """`ModelAccess` that reserves every request in the run's ledgers (see the module
    docstring); the requests themselves go through `inner`."""

    def __init__(self, inner: ModelAccess, ledgers: tuple[Ledger, ...]) -> None:
        self.inner = inner
        self.ledgers = ledgers

    def failing_fast(self) -> BudgetedAccess:
        """The inner access's fail-fast form, still budgeted (for a fallback model)."""
        fast = getattr(self.inner, "failing_fast", None)
        return BudgetedAccess(fast(), self.ledgers) if callable(fast) else self

    async def _hold(
        self, model: Model, messages: Sequence[Message], options: ModelOptions
    ) -> _Hold:
        amount, pricing = worst_case(model, messages, options)
        ledgers = self.ledgers
        if pricing is None:
            for ledger in ledgers:
                if ledger.budget.usd is not None and not ledger.budget.counts_tokens:
                    raise InvalidOptionsError(
                        f"a dollar budget cannot be held: the pricing of {model.provider} "
                        f"{model.name!r} is unknown; declare pricing=raygent.Pricing(...) "
                        "on the model, or give a token budget too",
                        provider=model.provider,
                        model=model.name,
                    )
        taken: list[Ledger] = []
        try:
            for ledger in ledgers:
                await ledger.reserve(amount)
                taken.append(ledger)
        except BaseException:
            for ledger in taken:
                ledger.settle(amount, NOTHING)
            raise
        return _Hold(ledgers, amount)

    async def complete(
        self,
        model: Model,
        messages: Sequence[Message],
        options: ModelOptions,
        signal: AbortSignal | None,
    ) -> ModelResponse:
        if callable(getattr(model, "through", None)):
            # A fallback: each of its attempts comes back here, held at its own prices.
            return await routed(model, self).complete(messages, options, signal=signal)
        hold = await self._hold(model, messages, options)
        try:
            response = await self.inner.complete(model, messages, options, signal)
        except BaseException as exc:
            hold.failed(exc)
            raise
        hold.settle(amount_of(response.usage))
        return response

    async def stream(
        self,
        model: Model,
        messages: Sequence[Message],
        options: ModelOptions,
        signal: AbortSignal | None,
    ) -> AsyncIterator[StreamChunk]:
        chunks: AsyncIterator[Any]
        if callable(getattr(model, "through", None)):
            chunks = routed(model, self).stream(messages, options, signal=signal)
            async with closing_stream(chunks):
                async for chunk in chunks:
                    yield chunk
            return
        hold = await self._hold(model, messages, options)
        settled = False
        try:
            chunks = self.inner.stream(model, messages, options, signal)
            async with closing_stream(chunks):
                async for chunk in chunks:
                    if isinstance(chunk, Done):
                        hold.settle(amount_of(chunk.response.usage))
                        settled = True
                    yield chunk
        except BaseException as exc:
            if not settled:
                hold.failed(exc)
                settled = True
            raise
        finally:
            if not settled:  # closed early by the reader: charged as cut off
                hold.failed(GeneratorExit())

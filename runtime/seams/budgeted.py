"""The budget link of a run's request path: each request reserves its worst case in every
ledger of its run before it is sent, and settles at its real usage after.

A run with budgets gets this link in its request path (see `request_path`), so every
request of the run is held (its trips, a compaction's summaries, each attempt of a
fallback model at that model's own prices), whatever the backend, and a request that is
never sent (a cached reply, a middleware's) costs nothing. A provider-batch line is held
at its model's batch rates. A run's ledgers are its own budgets', its job's and, run as
a tool, its parent run's (`seams.attempt.RunScope`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from ..budgets import NOTHING, Amount, BudgetLedger, amount_of, worst_case
from ..errors import InvalidOptionsError, ProviderError
from ..models.contract import Done, ModelResponse, StreamChunk
from .contract import ModelAccess
from .link import Link, closing_stream
from .provider_lines import SendOnline
from .request import ModelRequest

__all__ = ["BudgetedAccess"]


class _Hold:
    """One request's reservation in each ledger."""

    __slots__ = ("amount", "batch", "ledgers")

    def __init__(self, ledgers: tuple[BudgetLedger, ...], amount: Amount, batch: bool) -> None:
        self.ledgers, self.amount, self.batch = ledgers, amount, batch

    def settle(self, actual: Amount) -> None:
        for ledger in self.ledgers:
            ledger.settle(self.amount, actual)

    def failed(self, error: BaseException) -> None:
        """A provider's error reply was not billed, nor a provider-batch line that failed
        or was not answered (its provider bills answers only); anything else (cut off,
        cancelled, timed out) may have been: it is charged its whole reservation."""
        if isinstance(error, SendOnline) or (
            isinstance(error, ProviderError)
            and (self.batch or error.details.get("status") is not None)
        ):
            self.settle(NOTHING)
        else:
            self.settle(self.amount)


class BudgetedAccess(Link):
    """The budget link (see the module docstring): reserves every request in `ledgers`,
    at its model's batch rates with `batch=True`; the requests go through `inner`."""

    __slots__ = ("batch", "ledgers")

    def __init__(
        self, inner: ModelAccess, ledgers: tuple[BudgetLedger, ...], *, batch: bool = False
    ) -> None:
        super().__init__(inner)
        self.ledgers = ledgers
        self.batch = batch

    async def _hold(self, request: ModelRequest) -> _Hold:
        model = request.model
        amount, pricing = worst_case(model, request.messages, request.options, batch=self.batch)
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
        taken: list[BudgetLedger] = []
        try:
            for ledger in ledgers:
                await ledger.reserve(amount)
                taken.append(ledger)
        except BaseException:
            for ledger in taken:
                ledger.settle(amount, NOTHING)
            raise
        return _Hold(ledgers, amount, self.batch)

    async def send(self, request: ModelRequest) -> ModelResponse:
        hold = await self._hold(request)
        try:
            response = await self.inner.complete(request)
        except BaseException as exc:
            hold.failed(exc)
            raise
        hold.settle(amount_of(response.usage))
        return response

    async def send_stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        hold = await self._hold(request)
        settled = False
        try:
            chunks = self.inner.stream(request)
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

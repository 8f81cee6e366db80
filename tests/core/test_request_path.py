"""A run's request path (issue #36, point 1): built in one place, in one order, with a link
only for a feature the run asks for; a fallback split once, by the outermost link, its
non-last models failing fast down to the bound."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Any

import raygent
from raygent import Budget, ResponseCache
from raygent.abort import AbortSignal
from raygent.budgets import LocalBudgetLedger
from raygent.cache import CachedAccess
from raygent.errors import RateLimitError
from raygent.messages import Message
from raygent.models.contract import Done, Model, ModelOptions, ModelResponse, StreamChunk
from raygent.seams import LOCAL, BudgetedAccess, Link, ModelAccess, request_path
from raygent.seams.attempt import AttemptState, current_attempt
from raygent.seams.request_path import BatchOrOnline
from raygent.testing import ScriptedModel


class Recorder:
    """A bound (the backend's access) that records each request's model, and whether it
    came through its fail-fast form; `down` names models that answer with a 429."""

    def __init__(self, down: Sequence[str] = (), fast: bool = False, seen: list[Any] | None = None):
        self.down, self.fast = tuple(down), fast
        self.seen: list[tuple[Any, bool]] = [] if seen is None else seen

    def failing_fast(self) -> Recorder:
        return Recorder(self.down, fast=True, seen=self.seen)

    async def complete(
        self,
        model: Model,
        messages: Sequence[Message],
        options: ModelOptions,
        signal: AbortSignal | None,
    ) -> ModelResponse:
        self.seen.append((model, self.fast))
        if model.name in self.down:
            raise RateLimitError(f"{model.name} is busy", provider=model.provider, status=429)
        return await model.complete(messages, options, signal=signal)

    async def stream(
        self,
        model: Model,
        messages: Sequence[Message],
        options: ModelOptions,
        signal: AbortSignal | None,
    ) -> AsyncIterator[StreamChunk]:
        yield Done(await self.complete(model, messages, options, signal))


class Lines:
    """Provider-batch lines of our own: every request goes by batch."""

    def by_batch(self, model: Model, *, first: bool) -> bool:
        return True

    def sender(self, trip: int) -> ModelAccess:
        return Recorder()

    def note_online(self) -> None:
        raise AssertionError("nothing goes online here")


def _fallback() -> Any:
    return raygent.fallback_model(
        [ScriptedModel(["one"] * 4, name="m1"), ScriptedModel(["two"] * 4, name="m2")]
    )


async def test_a_run_with_no_cache_budget_or_batch_gets_the_backends_access_itself() -> None:
    bound = Recorder()
    assert request_path(bound) is bound
    # A run on it: the fallback reaches the bound whole, so no link of an unused feature
    # (a cache, a budget's ledger, a line pool) stood in between.
    backend = dataclasses.replace(LOCAL, models=bound)
    bot = raygent.agent(model=_fallback(), backend=backend)
    stream = bot.stream("hi")
    events = [event async for event in stream]
    for result in [await bot.execute("hi"), await stream.result]:
        assert result.ok and result.text == "one"
    assert events[-1].type == "agent.completed"
    assert [model for model, _ in bound.seen] == [bot.model, bot.model]


def test_the_links_are_chained_in_their_documented_order() -> None:
    bound, cache, ledger = Recorder(), ResponseCache(), LocalBudgetLedger(Budget(tokens=10**6))
    only_budget = request_path(bound, ledgers=[ledger])
    assert isinstance(only_budget, BudgetedAccess) and only_budget.inner is bound
    path = request_path(bound, cache=cache, ledgers=[ledger], lines=Lines(), trip=3)
    # cache -> route -> {batch: budget at batch rates -> line | online: budget -> bound}
    assert isinstance(path, CachedAccess) and path.cache is cache
    route = path.inner
    assert isinstance(route, BatchOrOnline)
    online, by_batch = route.inner, route.by_batch
    assert isinstance(online, BudgetedAccess) and not online.batch and online.inner is bound
    assert isinstance(by_batch, BudgetedAccess) and by_batch.batch
    assert isinstance(by_batch.inner, Recorder)
    assert all(isinstance(link, Link) for link in (path, route, online, by_batch))
    # Without lines: cache -> budget -> bound.
    online_path = request_path(bound, cache=cache, ledgers=[ledger])
    assert isinstance(online_path, CachedAccess)
    assert isinstance(online_path.inner, BudgetedAccess) and online_path.inner.inner is bound


async def test_a_fallback_is_split_once_and_its_first_model_fails_fast_at_the_bound() -> None:
    bound = Recorder(down=["m1"])
    ledger = LocalBudgetLedger(Budget(tokens=10**6))
    bot = raygent.agent(
        model=_fallback(),
        backend=dataclasses.replace(LOCAL, models=bound),
        cache=ResponseCache(),
        budget=Budget(tokens=10**6),
    )
    token = current_attempt.set(AttemptState(job_budget=ledger))  # as a batch's job sets it
    try:
        result = await bot.execute("hi")
    finally:
        current_attempt.reset(token)
    assert result.ok and result.text == "two"
    # Each model came down the chain alone; the one with a model after it failed fast.
    assert [(model.name, fast) for model, fast in bound.seen] == [("m1", True), ("m2", False)]
    # Both attempts were held by the budget link, once each (a 429 is not billed).
    spent, reserved = await ledger.standing()
    assert spent[4] == 1 and reserved == (0.0,) * 5

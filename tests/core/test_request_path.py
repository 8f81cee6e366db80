"""A run's request path (issues #36 and #45): built in one place, in one order, with a link
only for a feature the run asks for; a request travels down it as one typed value
(`ModelRequest`) carrying its context; a fallback is split once, by the outermost link,
its non-last models failing fast by their route; under the chain, one access layer
admits, sends, records and handles 429s for `complete` and `stream` alike."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import raygent
from raygent import Budget, ResponseCache
from raygent.budgets import LocalBudgetLedger
from raygent.cache import CachedAccess
from raygent.errors import RateLimitError
from raygent.messages import UserMessage
from raygent.models.contract import Done, Limits, Model, ModelResponse, StreamChunk, TextDelta
from raygent.seams import (
    LOCAL,
    AccessLayer,
    BudgetedAccess,
    Link,
    ModelAccess,
    ModelRequest,
    RequestContext,
    RequestRecord,
    RetryPolicy,
    RunScope,
    request_path,
)
from raygent.seams.request_path import BatchOrOnline
from raygent.sim import Fault, Reply, Rule, ServiceTiers, serve
from raygent.testing import ScriptedModel

ROOT = Path(__file__).resolve().parents[2]


class Recorder:
    """A bound (the backend's access) that records each request it gets; `down` names
    models that answer with a 429."""

    def __init__(self, down: Sequence[str] = ()) -> None:
        self.down = tuple(down)
        self.seen: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.seen.append(request)
        model = request.model
        if model.name in self.down:
            raise RateLimitError(f"{model.name} is busy", provider=model.provider, status=429)
        return await model.complete(request.messages, request.options, signal=request.signal)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        yield Done(await self.complete(request))


class Lines:
    """Provider-batch lines of our own: every request goes by batch."""

    deadline = None

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
    assert [request.model for request in bound.seen] == [bot.model, bot.model]


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


async def test_a_fallback_is_split_once_and_its_first_model_fails_fast_by_its_route() -> None:
    bound = Recorder(down=["m1"])
    ledger = LocalBudgetLedger(Budget(tokens=10**6))
    bot = raygent.agent(
        model=_fallback(),
        backend=dataclasses.replace(LOCAL, models=bound),
        cache=ResponseCache(),
        budget=Budget(tokens=10**6),
    )
    # As a batch gives its attempt's run its job's ledger: in the run's scope.
    result = await bot.execute("hi", scope=RunScope((ledger,), job="job-7"))
    assert result.ok and result.text == "two"
    # Each model came down the chain alone, as its own request: the one with a model
    # after it marked to fail fast, the last not; both the same trip of the same run.
    routes = [(r.model.name, r.route.position, r.route.fail_fast) for r in bound.seen]
    assert routes == [("m1", 0, True), ("m2", 1, False)]
    contexts = {(r.context.run_id, r.context.trip, r.context.job) for r in bound.seen}
    assert contexts == {(result.report.run_id, 0, "job-7")}
    # Both attempts were held by the budget link, once each (a 429 is not billed).
    spent, reserved = await ledger.standing()
    assert spent[4] == 1 and reserved == (0.0,) * 5
    [failed] = result.report.trips[0].attempts
    assert failed["model"] == "m1" and result.usage.requests == 2


# -- the access layer ------------------------------------------------------------------


class Counters:
    """Admissions of our own (the seam a backend implements): what they were asked, and
    how each admission was settled."""

    def __init__(self) -> None:
        self.events: list[str] = []

    async def admit(self, request: ModelRequest, limits: Limits) -> Counted:
        self.events.append(f"admit {request.options.service_tier}")
        return Counted(self.events)


class Counted:
    rate_wait = 0.25

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def answered(self, response: ModelResponse) -> None:
        self.events.append("answered")

    def throttled(self, error: RateLimitError, pause: float | None) -> None:
        self.events.append(f"throttled {pause}")

    def failed(self) -> None:
        self.events.append("failed")

    def done(self) -> None:
        self.events.append("done")


def _sim_model(sim: Any, **kwargs: Any) -> Any:
    return raygent.OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="k", **kwargs)


@pytest.mark.parametrize("streamed", [False, True])
async def test_complete_and_stream_are_admitted_retried_and_recorded_alike(streamed: bool) -> None:
    script = [
        Rule(reply=Reply(fault=Fault(kind="status", status=429, retry_after=0.01)), times=1),
        Rule(reply=Reply(text="fine")),
    ]
    counters = Counters()
    layer = AccessLayer(counters, RetryPolicy(max_attempts=3))
    record = RequestRecord()
    async with serve(script) as sim:
        request = ModelRequest(
            _sim_model(sim),
            [UserMessage(content="hi")],
            raygent.ModelOptions(),
            context=RequestContext(record=record),
        )
        if streamed:
            chunks = [chunk async for chunk in layer.stream(request)]
            assert any(isinstance(chunk, TextDelta) for chunk in chunks)
            done = chunks[-1]
            assert isinstance(done, Done)
            response = done.response
        else:
            response = await layer.complete(request)
    assert response.text == "fine"
    # Admitted twice; the 429 paused the counters (its Retry-After), the reply settled.
    assert counters.events == [
        "admit None", "throttled 0.01", "done", "admit None", "answered", "done",
    ]  # fmt: skip
    assert (record.sends, record.throttled, record.rate_wait) == (2, 1, 0.5)
    assert [(a["status"], a["ok"], a["wait"]) for a in response.attempts] == [
        (429, False, 0.01),
        (None, True, None),
    ]
    assert response.usage.requests == 2  # the 429 counted, billed at nothing


async def test_a_tier_refused_for_capacity_is_sent_again_at_its_fallback_by_the_layer() -> None:
    counters = Counters()
    async with serve(
        [Rule(reply=Reply(text="served"))], tiers=ServiceTiers(flex_refusal_rate=1.0)
    ) as sim:
        model = _sim_model(sim, service_tier=raygent.Tier("flex", fallback="default"))
        request = ModelRequest(model, [UserMessage(content="hi")], raygent.ModelOptions())
        response = await AccessLayer(counters).complete(request)
        await sim.wait_until(lambda stats: stats.requests == 2, 10)  # (counted at its end)
        bodies = [(r.body or {}).get("service_tier") for r in sim.requests]
    # The adapter was given a plain tier each time (its own resend never fired): the
    # layer asked at flex, then, refused for capacity, at the fallback; nobody paused.
    assert bodies == ["flex", "default"]
    assert counters.events == [
        "admit flex", "failed", "done", "admit default", "answered", "done",
    ]  # fmt: skip
    [refused] = response.attempts
    assert (refused["service_tier"], refused["fallback"]) == ("flex", "default")
    assert response.usage.requests == 2


async def test_a_fail_fast_route_sends_a_429_back_at_once() -> None:
    script = [Rule(reply=Reply(fault=Fault(kind="status", status=429, retry_after=0.01)))]
    counters = Counters()
    async with serve(script) as sim:
        request = ModelRequest(_sim_model(sim), [UserMessage(content="hi")], raygent.ModelOptions())
        first = request.going(dataclasses.replace(request.route, fail_fast=True))
        with pytest.raises(RateLimitError):
            await AccessLayer(counters).complete(first)
        assert sim.stats().requests == 1
    assert counters.events == ["admit None", "throttled 0.01", "done"]


def test_both_backends_send_through_the_one_access_layer() -> None:
    """Local and Ray differ only in their counters (`Admissions`): the send, its 429s,
    the tier's fallback and the books are `AccessLayer`'s, not overridden."""
    from raygent.actors import RayModelAccess

    for access in (LOCAL.models, RayModelAccess()):
        assert isinstance(access, AccessLayer)
        assert type(access).send is AccessLayer.send
        assert type(access).send_stream is AccessLayer.send_stream


def test_no_context_variable_carries_a_request_through_the_core() -> None:
    """The request path and the agent loop hand a request's context on as values."""
    checked = [*(ROOT / "runtime" / "seams").glob("*.py"), ROOT / "runtime/agents/_trip.py"]
    checked += [ROOT / "runtime/agents/_tool_round.py", ROOT / "runtime/flows/_flow.py"]
    for path in checked:
        tree = ast.parse(path.read_text())
        names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        assert "ContextVar" not in names, path

"""The gateway's limits and batching, in-process (no Ray needed): the logic the gateway
actors run, driven directly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from ray_support import sim_model

from raygent import ModelOptions, UserMessage
from raygent.actors import Gateway, GatewayLimits, RetryPolicy, StreamBatching
from raygent.actors._gateway_actor import batches
from raygent.actors._limits import Slots, TokenBucket, partition
from raygent.errors import InvalidRequestError, RateLimitError
from raygent.models.contract import Done, ModelResponse, StreamChunk, TextDelta
from raygent.sim import Fault, Match, Reply, Rule, serve
from raygent.usage import Usage


@pytest.mark.parametrize(
    ("total", "parts", "shares"),
    [(8, 2, [4, 4]), (5, 2, [3, 2]), (3, 5, [1, 1, 1]), (64, 1, [64])],
)
def test_replicas_split_a_bound_never_multiply_it(
    total: int, parts: int, shares: list[int]
) -> None:
    assert partition(total, parts) == shares


async def test_slots_are_fifo_and_a_cancelled_waiter_leaks_nothing() -> None:
    slots = Slots(2)
    order: list[int] = []

    async def hold(i: int) -> None:
        await slots.acquire()
        order.append(i)
        await asyncio.sleep(0.01)
        slots.release()

    await slots.acquire()
    await slots.acquire()
    waiter = asyncio.ensure_future(slots.acquire())
    await asyncio.sleep(0)
    waiter.cancel()
    tasks = [asyncio.ensure_future(hold(i)) for i in range(5)]
    await asyncio.sleep(0)
    slots.release()
    slots.release()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4]
    assert slots.in_use == 0


def test_slots_shrink_on_429_and_grow_back() -> None:
    slots = Slots(8)
    slots.in_use = 6
    slots.shrink()
    assert slots.limit == 5
    slots.in_use = 0
    for _ in range(100):
        slots.grow()
    assert slots.limit == 8  # never past the declared bound


async def test_a_token_bucket_waits_for_its_refill_and_settles_debts() -> None:
    bucket = TokenBucket(per_minute=600)  # 10 a second
    await bucket.take(600)
    bucket.settle(estimated=100, actual=102)  # 2 more than taken: a debt
    clock = time.monotonic()
    await bucket.take(1)
    assert 0.2 < time.monotonic() - clock < 1.0  # waited for the debt and the token


async def _chunks(count: int, gap: float, fail: bool = False) -> AsyncIterator[StreamChunk]:
    for i in range(count):
        if gap:
            await asyncio.sleep(gap)
        yield TextDelta(str(i))
    if fail:
        raise InvalidRequestError("broke off")
    usage = Usage(requests=1)
    yield Done(ModelResponse(finish_reason="stop", usage=usage, provider="test"))


async def test_batches_group_fast_chunks_and_close_on_done() -> None:
    items = [b async for b in batches(_chunks(100, 0), StreamBatching(max_chunks=32))]
    assert all(len(b) <= 32 for b in items) and len(items) <= 6
    assert isinstance(items[-1][-1], Done)
    assert sum(len(b) for b in items) == 101


async def test_batches_linger_for_slow_chunks() -> None:
    batching = StreamBatching(max_chunks=32, linger=0.05)
    items = [b async for b in batches(_chunks(20, 0.01), batching)]
    assert len(items[0]) == 1  # the first chunk goes at once
    assert 3 <= len(items) <= 10  # then ~5 chunks a batch, not one per chunk
    assert [c.text for b in items for c in b if isinstance(c, TextDelta)] == [
        str(i) for i in range(20)
    ]


async def test_batches_deliver_what_came_before_an_error() -> None:
    seen: list[StreamChunk] = []
    with pytest.raises(InvalidRequestError):
        async for batch in batches(_chunks(5, 0.001, fail=True), StreamBatching()):
            seen.extend(batch)
    assert len(seen) == 5


async def test_closing_batches_early_closes_the_source() -> None:
    closed = asyncio.Event()

    async def source() -> AsyncIterator[StreamChunk]:
        try:
            while True:
                yield TextDelta("x")
                await asyncio.sleep(0.001)
        finally:
            closed.set()

    stream = batches(source(), StreamBatching())
    await anext(stream)
    await stream.aclose()
    assert closed.is_set()


async def test_the_gateway_retries_429s_and_returns_other_errors_at_once() -> None:
    script = [
        Rule(match=Match(last_user="bad"), reply=Reply(fault=Fault(kind="status", status=400))),
        Rule(reply=Reply(fault=Fault(kind="status", status=429, retry_after=0.05)), times=2),
    ]
    messages, options = [UserMessage(content="hi")], ModelOptions()
    async with serve(script) as sim:
        gateway = Gateway(GatewayLimits(max_concurrency=4))
        model = sim_model(sim)
        response = await gateway.complete(model, messages, options)
        assert isinstance(response, ModelResponse)
        assert sim.stats().by_status == {429: 2, 200: 1}
        assert [a["status"] for a in response.attempts] == [429, 429, None]
        assert response.usage.requests == 3
        once = await gateway.complete(model, messages, options)  # the 429s are spent
        assert isinstance(once, ModelResponse)
        assert once.attempts == [] and once.usage.requests == 1
        sim.reset()
        bad = await gateway.complete(model, [UserMessage(content="bad")], options)
        assert isinstance(bad, InvalidRequestError) and sim.stats().requests == 1


async def test_the_gateway_gives_up_after_its_attempts() -> None:
    script = [Rule(reply=Reply(fault=Fault(kind="status", status=429, retry_after=0.01)))]
    async with serve(script) as sim:
        gateway = Gateway(GatewayLimits(retry=RetryPolicy(max_attempts=3)))
        result = await gateway.complete(sim_model(sim), [UserMessage(content="hi")], ModelOptions())
        stats = sim.stats()
    assert isinstance(result, RateLimitError)
    assert stats.requests == 3
    assert result.details["attempts"] == 3


async def test_the_gateway_holds_request_and_token_rates() -> None:
    messages = [UserMessage(content="hi")]
    async with serve() as sim:
        model = sim_model(sim)
        gateway = Gateway(GatewayLimits(requests_per_minute=600, tokens_per_minute=60_000))
        requests, tokens = gateway._requests, gateway._tokens
        assert requests is not None and tokens is not None
        requests.level = 0  # the minute's requests are spent: the next waits ~0.1 s
        clock = time.monotonic()
        response = await gateway.complete(model, messages, ModelOptions(max_tokens=300))
        assert isinstance(response, ModelResponse)
        assert time.monotonic() - clock > 0.08
        tokens.level = 0  # the tokens are spent: prompt + max_tokens take ~0.3 s to come back
        clock = time.monotonic()
        await gateway.complete(model, messages, ModelOptions(max_tokens=300))
        assert time.monotonic() - clock > 0.25

"""The local backend's per-endpoint bound (`raygent.seams._endpoint_bound`): each request is
admitted under its own model's limit, first come first served, and a waiter cancelled
(before or after it was admitted) leaks no slot and holds no one back."""

from __future__ import annotations

import asyncio

from raygent.seams._endpoint_bound import EndpointBound


async def _holder(
    bound: EndpointBound, limit: int, order: list[str], name: str, go: asyncio.Event
) -> None:
    await bound.acquire(limit)
    order.append(name)
    try:
        await go.wait()
    finally:
        bound.release()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_each_request_is_admitted_under_its_own_limit_in_arrival_order() -> None:
    bound, order, go = EndpointBound(), [], asyncio.Event()
    loose = [asyncio.create_task(_holder(bound, 3, order, f"l{i}", go)) for i in range(3)]
    await _settle()
    assert bound.in_flight == 3
    # A tight request (limit 2) waits while 3 are in flight; a loose one behind it waits
    # too (first come, first served), though its own limit of 4 would let it through.
    tight = asyncio.create_task(_holder(bound, 2, order, "t", go))
    late = asyncio.create_task(_holder(bound, 4, order, "late", go))
    await _settle()
    assert order == ["l0", "l1", "l2"] and bound.in_flight == 3
    go.set()
    await asyncio.gather(*loose, tight, late)
    assert order[3:] == ["t", "late"]
    assert bound.in_flight == 0


async def test_a_cancelled_waiter_leaks_no_slot_and_holds_no_one_back() -> None:
    bound, order, go = EndpointBound(), [], asyncio.Event()
    first = asyncio.create_task(_holder(bound, 1, order, "first", go))
    await _settle()
    blocked = asyncio.create_task(_holder(bound, 1, order, "blocked", go))
    behind = asyncio.create_task(_holder(bound, 2, order, "behind", go))
    await _settle()
    assert order == ["first"]
    blocked.cancel()  # the head waiter goes: the one behind it fits under its limit of 2
    await _settle()
    assert order == ["first", "behind"] and bound.in_flight == 2
    go.set()
    await asyncio.gather(first, behind)
    assert blocked.cancelled() and bound.in_flight == 0


async def test_a_waiter_cancelled_once_admitted_gives_its_slot_back() -> None:
    bound = EndpointBound()
    await bound.acquire(1)
    waiter = asyncio.create_task(bound.acquire(1))
    await _settle()
    bound.release()  # admits the waiter (its future resolved)...
    waiter.cancel()  # ...which is cancelled before it runs
    await asyncio.gather(waiter, return_exceptions=True)
    assert bound.in_flight == 0
    await asyncio.wait_for(bound.acquire(1), timeout=1)
    assert bound.in_flight == 1

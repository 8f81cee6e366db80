"""The TimingStore contract, run on every store: samples round-trip newest first, keys
are apart, a history keeps only its newest MAX_TIMINGS, bad samples are refused, the
history is shared by clients and pickled copies (a cluster's drivers learn from one
history), and prune and conversations never touch it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import ray.cloudpickle as cloudpickle
from store_support import FakeClock, MakeStore

from raygent.stores import Scope, TimingSample, TimingStore
from raygent.stores._timings import MAX_TIMINGS


def _samples(count: int, way: str = "batch", start: int = 0) -> list[TimingSample]:
    return [
        TimingSample(way, seconds=float(start + i), ok=i % 3 != 0, at=1_000.0 + start + i)
        for i in range(count)
    ]


def test_timing_store_implements_the_protocol(store: Any) -> None:
    assert isinstance(store, TimingStore)


async def test_timings_round_trip_newest_first(store: Any) -> None:
    assert await store.timings("openai|gpt-4o-mini") == []
    first, second = _samples(3), _samples(2, way="flex", start=10)
    await store.add_timings("openai|gpt-4o-mini", first)
    await store.add_timings("openai|gpt-4o-mini", second)
    got = await store.timings("openai|gpt-4o-mini")
    assert got == [*second[::-1], *first[::-1]]
    assert all(type(s.seconds) is float and type(s.ok) is bool for s in got)
    assert await store.timings("openai|gpt-4o-mini", limit=2) == second[::-1]
    await store.add_timings("openai|gpt-4o-mini", [])  # nothing to add: nothing changes
    assert len(await store.timings("openai|gpt-4o-mini")) == 5


async def test_timing_keys_are_apart(store: Any) -> None:
    await store.add_timings("a", _samples(2))
    await store.add_timings("a|b", _samples(1, "standard"))
    await store.add_timings("b", _samples(1, "priority"))
    assert [s.way for s in await store.timings("a")] == ["batch", "batch"]
    assert [s.way for s in await store.timings("a|b")] == ["standard"]
    assert [s.way for s in await store.timings("b")] == ["priority"]


async def test_a_history_keeps_its_newest_samples(store: Any) -> None:
    await store.add_timings("k", _samples(MAX_TIMINGS - 10))
    await store.add_timings("k", _samples(30, start=MAX_TIMINGS - 10))
    got = await store.timings("k")
    assert len(got) == MAX_TIMINGS
    assert got[0].seconds == MAX_TIMINGS + 19 and got[-1].seconds == 20
    assert len(await store.timings("k", limit=MAX_TIMINGS + 5)) == MAX_TIMINGS


async def test_bad_timings_are_refused_and_nothing_is_written(store: Any) -> None:
    good = TimingSample("batch", 1.0)
    bad_values: list[Any] = [
        TimingSample("", 1.0),
        TimingSample("batch", -1.0),
        TimingSample("batch", float("nan")),
        TimingSample("batch", 1.0, at=float("inf")),
    ]
    for bad in bad_values:
        with pytest.raises(ValueError):
            await store.add_timings("k", [good, bad])
    with pytest.raises(TypeError):
        await store.add_timings("k", [good, ("batch", 1.0)])
    with pytest.raises(ValueError):
        await store.add_timings("", [good])
    with pytest.raises(ValueError):
        await store.timings("k", limit=0)
    assert await store.timings("k") == []


@pytest.mark.kinds("sqlite", "redis", "postgres")
async def test_timings_are_shared_by_clients_and_copies(make_store: MakeStore) -> None:
    writer, reader = make_store(), make_store()
    await asyncio.gather(
        writer.add_timings("k", _samples(5)), reader.add_timings("k", _samples(5, "flex"))
    )
    assert len(await reader.timings("k")) == 10
    copy = cloudpickle.loads(cloudpickle.dumps(writer))
    try:
        await copy.add_timings("k", [TimingSample("standard", 0.5)])
        assert (await writer.timings("k", limit=1))[0].way == "standard"
    finally:
        await copy.aclose()


@pytest.mark.kinds("memory", "sqlite", "postgres")
async def test_prune_and_conversations_leave_timings_alone(
    make_store: MakeStore, clock: FakeClock
) -> None:
    store = make_store(clock=clock, ttl=10)
    await store.add_timings("k", _samples(2))
    scope = Scope("k")
    await store.clear(scope)
    clock.advance(100)
    await store.prune()
    await store.prune(clock() + 1)
    assert len(await store.timings("k")) == 2

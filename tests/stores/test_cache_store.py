"""The CacheStore contract, run on every store: values round-trip as bytes, a write
replaces, namespaces and keys are apart, a value expires after its ttl (on the store's
clock; Redis on its own), prune removes expired values, values survive a second client
of the same store and a pickled copy, and conversations and runs never see them."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import ray.cloudpickle as cloudpickle
from store_support import FakeClock, MakeStore

from raygent import UserMessage
from raygent.stores import CacheStore, RedisStore, Scope


async def eventually_none(store: Any, namespace: str, key: str, within: float = 10.0) -> None:
    """Wait (bounded) until the value is gone: Redis expires on its own clock."""
    deadline = time.monotonic() + within
    while await store.get_cached(namespace, key) is not None:
        assert time.monotonic() < deadline, "the value did not expire"
        await asyncio.sleep(0.02)


def test_cache_store_implements_the_protocol(store: Any) -> None:
    assert isinstance(store, CacheStore)


async def test_cache_store_round_trips_bytes_and_replaces(store: Any) -> None:
    assert await store.get_cached("ns", "k") is None
    value = bytes(range(256)) * 40  # every byte value, 10 KB
    await store.put_cached("ns", "k", value)
    assert await store.get_cached("ns", "k") == value
    await store.put_cached("ns", "k", b"second")
    assert await store.get_cached("ns", "k") == b"second"
    await store.put_cached("ns", "empty", b"")
    assert await store.get_cached("ns", "empty") == b""


async def test_cache_store_keeps_namespaces_and_keys_apart(store: Any) -> None:
    await store.put_cached("a", "k", b"a-k")
    await store.put_cached("b", "k", b"b-k")
    await store.put_cached("a", "k2", b"a-k2")
    await store.put_cached("a:k", "x", b"colon")  # no confusion of the joined names
    assert await store.get_cached("a", "k") == b"a-k"
    assert await store.get_cached("b", "k") == b"b-k"
    assert await store.get_cached("a", "k2") == b"a-k2"
    assert await store.get_cached("a:k", "x") == b"colon"
    assert await store.get_cached("a", "k:x") is None


async def test_cache_store_refuses_bad_arguments(store: Any) -> None:
    with pytest.raises(TypeError):
        await store.put_cached("ns", "k", "text")
    for ttl in (0, -1.0, True):
        with pytest.raises(ValueError):
            await store.put_cached("ns", "k", b"v", ttl)
    with pytest.raises(ValueError):
        await store.get_cached("", "k")
    with pytest.raises(ValueError):
        await store.put_cached("ns", "", b"v")


@pytest.mark.kinds("memory", "sqlite", "postgres")
async def test_cache_store_expires_values_on_the_store_clock(
    make_store: MakeStore, clock: FakeClock
) -> None:
    store = make_store(clock=clock)
    await store.put_cached("ns", "short", b"s", ttl=10)
    await store.put_cached("ns", "forever", b"f")
    clock.advance(9.9)
    assert await store.get_cached("ns", "short") == b"s"
    clock.advance(0.2)
    assert await store.get_cached("ns", "short") is None
    assert await store.get_cached("ns", "forever") == b"f"
    await store.put_cached("ns", "short", b"again", ttl=10)  # a rewrite lives anew
    assert await store.get_cached("ns", "short") == b"again"


@pytest.mark.kinds("memory", "sqlite", "postgres")
async def test_cache_store_prune_removes_expired_values(
    make_store: MakeStore, clock: FakeClock
) -> None:
    store = make_store(clock=clock)
    await store.put_cached("ns", "old", b"o", ttl=1)
    await store.put_cached("ns", "new", b"n", ttl=100)
    await store.put_cached("ns", "forever", b"f")
    clock.advance(2)
    assert await store.prune() == 1
    assert await store.prune() == 0
    assert await store.get_cached("ns", "new") == b"n"
    assert await store.get_cached("ns", "forever") == b"f"


async def test_cache_store_expires_values_after_their_ttl(store: Any) -> None:
    # Real time on every store (Redis has no clock to fake): a short ttl, a bounded wait.
    await store.put_cached("ns", "k", b"v", ttl=0.2)
    await store.put_cached("ns", "kept", b"v")
    await eventually_none(store, "ns", "k")
    assert await store.get_cached("ns", "kept") == b"v"


@pytest.mark.kinds("sqlite", "redis", "postgres")
async def test_cache_store_values_are_shared_by_clients_and_copies(
    make_store: MakeStore,
) -> None:
    writer, reader = make_store(), make_store()
    await writer.put_cached("ns", "k", b"shared")
    assert await reader.get_cached("ns", "k") == b"shared"
    copy = cloudpickle.loads(cloudpickle.dumps(writer))
    try:
        assert await copy.get_cached("ns", "k") == b"shared"
    finally:
        await copy.aclose()


async def test_cache_store_values_never_meet_conversations_or_runs(store: Any) -> None:
    scope = Scope("k")
    await store.put_cached("default", store.ref(scope), b"cached")
    assert await store.load(scope) == []
    assert await store.load_run(scope) is None
    await store.append(scope, "r", 0, [UserMessage(content="hi")])
    await store.clear(scope)
    assert await store.get_cached("default", store.ref(scope)) == b"cached"
    if isinstance(store, RedisStore):  # its key sits under the store's prefix
        assert store.cache_key("default", "x").startswith(f"{store.prefix}:")


async def test_cache_store_concurrent_writes_of_one_key_leave_one_whole_value(
    store: Any,
) -> None:
    values = [bytes([i]) * 1000 for i in range(20)]
    await asyncio.gather(*(store.put_cached("ns", "k", v) for v in values))
    assert await store.get_cached("ns", "k") in values

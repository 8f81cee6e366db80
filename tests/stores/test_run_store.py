"""The RunStore contract, run on every store: start and load, epoch fencing, one winner
of concurrent claims, sequence checks and idempotent retries, finish, delete, expiry and
prune, tenant isolation, and runs kept apart from conversations."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from datetime import datetime, timezone
from typing import Any

import pytest
import ray.cloudpickle as cloudpickle
import redis
from store_support import FakeClock, MakeStore

from raygent import UserMessage
from raygent.stores import (
    RedisStore,
    RunConflictError,
    RunRecord,
    RunStore,
    Scope,
    StoreDataError,
)

RUN = Scope("run-1", "user-1")


async def conflict(call: Awaitable[Any]) -> RunConflictError:
    with pytest.raises(RunConflictError) as caught:
        await call
    return caught.value


async def record(store: Any, scope: Scope = RUN) -> RunRecord:
    loaded = await store.load_run(scope)
    assert loaded is not None
    return loaded


def test_run_store_implements_the_protocol(store: Any) -> None:
    assert isinstance(store, RunStore)


async def test_run_store_start_and_load_round_trip(store: Any) -> None:
    assert await store.load_run(RUN) is None
    assert await store.start_run(RUN, b"header\x00\xff") == 1
    await store.append_run(RUN, 1, 0, b"e0")
    await store.append_run(RUN, 1, 1, b"\x00" * 5000)
    loaded = await record(store)
    assert loaded.ref == store.ref(RUN)
    assert (loaded.epoch, loaded.header, loaded.outcome) == (1, b"header\x00\xff", None)
    assert loaded.entries == [b"e0", b"\x00" * 5000]
    assert loaded.updated_at.tzinfo is not None
    error = await conflict(store.start_run(RUN, b"again"))
    assert error.details == {
        "ref": store.ref(RUN),
        "reason": "exists",
        "expected": None,
        "actual": 1,
    }
    assert (await record(store)).header == b"header\x00\xff"


async def test_run_store_records_the_time_of_the_last_write(
    make_store: MakeStore, clock: FakeClock
) -> None:
    store = make_store(clock=clock)
    await store.start_run(RUN, b"h")
    clock.advance(10)
    await store.append_run(RUN, 1, 0, b"e0")
    assert (await record(store)).updated_at == datetime.fromtimestamp(clock.now, timezone.utc)


async def test_run_store_refuses_what_is_not_bytes_or_a_valid_number(store: Any) -> None:
    with pytest.raises(TypeError):
        await store.start_run(RUN, "text")
    await store.start_run(RUN, b"h")
    with pytest.raises(TypeError):
        await store.append_run(RUN, 1, 0, bytearray(b"e"))
    with pytest.raises(ValueError):
        await store.append_run(RUN, 1, -1, b"e")
    with pytest.raises(ValueError):
        await store.append_run(RUN, 0, 0, b"e")
    with pytest.raises(ValueError):
        await store.claim_run(RUN, True)
    assert (await record(store)).entries == []


async def test_run_store_missing_run(store: Any) -> None:
    assert await store.load_run(RUN) is None
    for call in (
        store.append_run(RUN, 1, 0, b"e"),
        store.claim_run(RUN, 1),
        store.finish_run(RUN, 1, b"done"),
    ):
        error = await conflict(call)
        assert (error.reason, error.ref, error.actual) == ("missing", store.ref(RUN), None)
    await store.delete_run(RUN)  # a no-op
    assert await store.load_run(RUN) is None


async def test_run_store_fences_out_the_writer_of_an_older_epoch(store: Any) -> None:
    await store.start_run(RUN, b"h")
    await store.append_run(RUN, 1, 0, b"e0")
    assert await store.claim_run(RUN, 1) == 2
    error = await conflict(store.append_run(RUN, 1, 1, b"old writer"))
    assert (error.reason, error.expected, error.actual) == ("epoch", 1, 2)
    error = await conflict(store.append_run(RUN, 1, 0, b"e0"))  # not even a retry
    assert error.reason == "epoch"
    assert (await conflict(store.finish_run(RUN, 1, b"old"))).reason == "epoch"
    assert (await conflict(store.claim_run(RUN, 1))).reason == "epoch"
    loaded = await record(store)
    assert (loaded.epoch, loaded.entries, loaded.outcome) == (2, [b"e0"], None)
    await store.append_run(RUN, 2, 1, b"e1")  # the new holder writes on
    assert await store.claim_run(RUN, 2) == 3
    assert (await record(store)).entries == [b"e0", b"e1"]


async def test_run_store_two_claims_at_once_one_wins(store: Any) -> None:
    await store.start_run(RUN, b"h")
    for epoch in (1, 2, 3):
        results = await asyncio.gather(
            *(store.claim_run(RUN, epoch) for _ in range(4)), return_exceptions=True
        )
        assert [r for r in results if not isinstance(r, BaseException)] == [epoch + 1]
        losers = [r for r in results if isinstance(r, BaseException)]
        assert len(losers) == 3
        assert all(isinstance(r, RunConflictError) and r.reason == "epoch" for r in losers)
    assert (await record(store)).epoch == 4


@pytest.mark.kinds("sqlite", "redis", "postgres")
async def test_run_store_two_store_instances_claiming_at_once_one_wins(
    make_store: MakeStore,
) -> None:
    first, second = make_store(), make_store()
    await first.start_run(RUN, b"h")
    assert (await record(second)).epoch == 1
    for epoch in (1, 2, 3):
        results = await asyncio.gather(
            first.claim_run(RUN, epoch), second.claim_run(RUN, epoch), return_exceptions=True
        )
        winners = [r for r in results if not isinstance(r, BaseException)]
        assert winners == [epoch + 1], results
        [loser] = [r for r in results if isinstance(r, BaseException)]
        assert isinstance(loser, RunConflictError) and loser.reason == "epoch"
    # Both instances see the same run; the fenced one cannot write.
    winner = await second.claim_run(RUN, 4)
    await second.append_run(RUN, winner, 0, b"e0")
    assert (await conflict(first.append_run(RUN, 4, 1, b"stale"))).reason == "epoch"
    assert (await record(first)).entries == [b"e0"]


async def test_run_store_sequence_conflicts_and_idempotent_retries(store: Any) -> None:
    await store.start_run(RUN, b"h")
    error = await conflict(store.append_run(RUN, 1, 1, b"e1"))  # a gap
    assert (error.reason, error.expected, error.actual) == ("sequence", 1, 0)
    await store.append_run(RUN, 1, 0, b"e0")
    await store.append_run(RUN, 1, 1, b"e1")
    await store.append_run(RUN, 1, 1, b"e1")  # a retry: nothing written
    await store.append_run(RUN, 1, 0, b"e0")
    error = await conflict(store.append_run(RUN, 1, 1, b"another e1"))
    assert (error.reason, error.expected, error.actual) == ("sequence", 1, 2)
    assert (await record(store)).entries == [b"e0", b"e1"]
    await store.append_run(RUN, 1, 2, b"e2")
    assert (await record(store)).entries == [b"e0", b"e1", b"e2"]


async def test_run_store_concurrent_appends_of_one_seq_store_one_entry(store: Any) -> None:
    await store.start_run(RUN, b"h")
    results = await asyncio.gather(
        *(store.append_run(RUN, 1, 0, b"a" if i % 2 else b"b") for i in range(6)),
        return_exceptions=True,
    )
    [stored] = (await record(store)).entries
    # The writers of the stored bytes all succeed (the first writes, the others retry).
    assert [r for i, r in enumerate(results) if (b"a" if i % 2 else b"b") == stored] == [None] * 3
    failed = [r for r in results if isinstance(r, BaseException)]
    assert len(failed) == 3
    assert all(isinstance(r, RunConflictError) and r.reason == "sequence" for r in failed)


async def test_run_store_finish_keeps_or_drops_the_entries(store: Any) -> None:
    kept, dropped = Scope("kept"), Scope("dropped")
    for scope in (kept, dropped):
        await store.start_run(scope, b"h")
        await store.append_run(scope, 1, 0, b"e0")
    await store.finish_run(kept, 1, b"done")
    await store.finish_run(dropped, 1, b"done", drop_entries=True)
    kept_run, dropped_run = await record(store, kept), await record(store, dropped)
    assert (kept_run.header, kept_run.entries, kept_run.outcome) == (b"h", [b"e0"], b"done")
    assert (dropped_run.header, dropped_run.entries, dropped_run.outcome) == (b"h", [], b"done")
    for scope in (kept, dropped):
        error = await conflict(store.append_run(scope, 1, 1, b"late"))
        assert error.reason == "finished"
        assert (await conflict(store.append_run(scope, 1, 0, b"e0"))).reason == "finished"
    await store.finish_run(kept, 1, b"again")  # finishing again replaces the outcome
    assert (await record(store, kept)).outcome == b"again"
    # A resume may claim a finished run (to answer from its outcome); it stays finished.
    assert await store.claim_run(kept, 1) == 2
    assert (await conflict(store.append_run(kept, 2, 1, b"late"))).reason == "finished"
    assert (await conflict(store.finish_run(kept, 1, b"stale"))).reason == "epoch"
    await store.finish_run(kept, 2, b"final", drop_entries=True)
    final = await record(store, kept)
    assert (final.epoch, final.entries, final.outcome) == (2, [], b"final")


async def test_run_store_delete_removes_the_run(store: Any) -> None:
    await store.start_run(RUN, b"h")
    await store.append_run(RUN, 1, 0, b"e0")
    await store.delete_run(RUN)
    assert await store.load_run(RUN) is None
    assert (await conflict(store.append_run(RUN, 1, 1, b"e1"))).reason == "missing"
    assert await store.start_run(RUN, b"new") == 1  # the id is free again
    fresh = await record(store)
    assert (fresh.header, fresh.entries) == (b"new", [])


@pytest.mark.kinds("memory", "sqlite", "postgres")
async def test_run_store_expires_runs_not_written_for_ttl(
    make_store: MakeStore, clock: FakeClock
) -> None:
    store = make_store(ttl=0.5, clock=clock)
    await store.start_run(RUN, b"h")
    clock.advance(0.4)
    await store.append_run(RUN, 1, 0, b"e0")  # a write: refreshes the ttl
    clock.advance(0.4)
    assert await store.claim_run(RUN, 1) == 2  # so is a claim
    clock.advance(0.4)
    assert (await record(store)).entries == [b"e0"]
    clock.advance(0.2)
    assert await store.load_run(RUN) is None
    assert (await conflict(store.append_run(RUN, 2, 1, b"e1"))).reason == "missing"
    assert (await conflict(store.claim_run(RUN, 2))).reason == "missing"
    assert await store.start_run(RUN, b"fresh") == 1  # expired: the id is free
    fresh = await record(store)
    assert (fresh.epoch, fresh.header, fresh.entries) == (1, b"fresh", [])


def _run_keys_exist(store: RedisStore, ref: str) -> bool:
    with redis.Redis.from_url(store.url) as client:
        return bool(client.exists(*store.run_keys(ref)[:2]))


def _run_pttls(store: RedisStore, ref: str) -> list[int]:
    with redis.Redis.from_url(store.url) as client:
        return [int(client.pttl(key)) for key in store.run_keys(ref)[:2]]


@pytest.mark.kinds("redis")
async def test_run_store_redis_run_expires_after_its_ttl(make_store: MakeStore) -> None:
    store = make_store(ttl=1)
    ref = store.ref(RUN)
    await store.start_run(RUN, b"h")
    await store.append_run(RUN, 1, 0, b"e0")
    assert all(0 < ttl <= 1000 for ttl in _run_pttls(store, ref))
    deadline = time.monotonic() + 10
    while _run_keys_exist(store, ref):  # poll the server's expiry, not a guessed sleep
        assert time.monotonic() < deadline, "the run outlived its TTL by 10 s"
        await asyncio.sleep(0.05)
    assert await store.load_run(RUN) is None
    assert (await conflict(store.append_run(RUN, 1, 1, b"e1"))).reason == "missing"
    assert await store.prune() == 1  # the stale index entry goes
    assert await store.start_run(RUN, b"fresh") == 1


@pytest.mark.kinds("redis")
async def test_run_store_redis_refreshes_the_ttl_on_every_write(make_store: MakeStore) -> None:
    store = make_store(ttl=1000)
    ref = store.ref(RUN)
    await store.start_run(RUN, b"h")
    await store.append_run(RUN, 1, 0, b"e0")
    writes = (
        lambda: store.append_run(RUN, 1, 1, b"e1"),
        lambda: store.claim_run(RUN, 1),
        lambda: store.finish_run(RUN, 2, b"done"),
    )
    for write in writes:
        with redis.Redis.from_url(store.url) as client:
            for key in store.run_keys(ref)[:2]:
                client.pexpire(key, 5_000)
        await write()
        assert all(ttl > 900_000 for ttl in _run_pttls(store, ref)), "a key kept the short TTL"
    plain = make_store()
    await plain.start_run(Scope("no-ttl"), b"h")
    await plain.append_run(Scope("no-ttl"), 1, 0, b"e")
    assert _run_pttls(plain, plain.ref(Scope("no-ttl"))) == [-1, -1]


@pytest.mark.kinds("redis")
async def test_run_store_redis_script_that_meets_a_foreign_key_writes_nothing(
    store: RedisStore,
) -> None:
    await store.start_run(RUN, b"h")
    _, entries, _ = store.run_keys(store.ref(RUN))
    with redis.Redis.from_url(store.url) as client:
        client.set(entries, b"not a list")
    with pytest.raises(StoreDataError, match="WRONGTYPE"):
        await store.append_run(RUN, 1, 0, b"e0")
    with pytest.raises(StoreDataError, match="WRONGTYPE"):
        await store.claim_run(RUN, 1)
    with redis.Redis.from_url(store.url) as client:
        assert client.get(entries) == b"not a list"
        client.delete(entries)
    assert (await record(store)).epoch == 1  # the claim wrote nothing


async def test_run_store_prune_counts_runs(make_store: MakeStore, clock: FakeClock) -> None:
    store = make_store(clock=clock)
    await store.start_run(Scope("old-run"), b"h")
    await store.append(Scope("old-conversation"), "r", 0, [UserMessage(content="a")])
    clock.advance(100)
    await store.start_run(Scope("new-run"), b"h")
    assert await store.prune() == 0  # no ttl: nothing expires by itself
    assert await store.prune(clock.now - 50) == 2
    assert await store.load_run(Scope("old-run")) is None
    assert await store.load_run(Scope("new-run")) is not None
    assert await store.prune(clock.now - 50) == 0


@pytest.mark.kinds("memory", "sqlite", "postgres")
async def test_run_store_prune_removes_expired_runs(
    make_store: MakeStore, clock: FakeClock
) -> None:
    store = make_store(ttl=60, clock=clock)
    await store.start_run(Scope("old"), b"h")
    clock.advance(61)
    await store.start_run(Scope("new"), b"h")
    assert await store.prune() == 1
    assert await store.load_run(Scope("new")) is not None


async def test_run_store_isolates_tenants_by_key_metadata(make_store: MakeStore) -> None:
    store = make_store(key_metadata=("tenant",))
    a = Scope("run-1", "user-1", {"tenant": "a", "other": "x"})
    b = Scope("run-1", "user-1", {"tenant": "b", "other": "x"})
    assert store.ref(a) != store.ref(b)
    await store.start_run(a, b"header a")
    assert await store.load_run(b) is None
    assert (await conflict(store.append_run(b, 1, 0, b"e"))).reason == "missing"
    assert await store.start_run(b, b"header b") == 1
    await store.append_run(a, 1, 0, b"a0")
    assert await store.claim_run(b, 1) == 2
    run_a, run_b = await record(store, a), await record(store, b)
    assert (run_a.header, run_a.entries, run_a.epoch) == (b"header a", [b"a0"], 1)
    assert (run_b.header, run_b.entries, run_b.epoch) == (b"header b", [], 2)
    # Metadata outside key_metadata does not select a run.
    same = Scope("run-1", "user-1", {"tenant": "a", "other": "y"})
    assert (await record(store, same)).header == b"header a"
    await store.delete_run(a)
    assert await store.load_run(a) is None
    assert await store.load_run(b) is not None


async def test_run_store_keeps_runs_apart_from_conversations(store: Any) -> None:
    scope = Scope("shared-id", "user-1")
    await store.append(scope, "r", 0, [UserMessage(content="hello")])
    assert await store.load_run(scope) is None
    assert (await conflict(store.claim_run(scope, 1))).reason == "missing"
    await store.start_run(scope, b"h")
    await store.append_run(scope, 1, 0, b"e0")
    assert [m.text for m in await store.load(scope)] == ["hello"]
    assert [c.message_count for c in await store.list_conversations()] == [1]
    await store.clear(scope)  # clears the conversation, not the run
    assert await store.load(scope) == []
    assert (await record(store, scope)).entries == [b"e0"]
    # A run alone is no conversation: not listed, nothing to load.
    other = Scope("run-only")
    await store.start_run(other, b"h")
    assert await store.list_conversations() == []
    assert await store.load(other) == []
    assert await store.errors(other) == []
    await store.append(scope, "r", 0, [UserMessage(content="again")])
    await store.delete_run(scope)  # deletes the run, not the conversation
    assert [m.text for m in await store.load(scope)] == ["again"]


async def test_run_store_pickles_with_its_runs(make_store: MakeStore, kind: str) -> None:
    store = make_store()
    await store.start_run(RUN, b"h")
    await store.append_run(RUN, 1, 0, b"e0")
    copy = cloudpickle.loads(cloudpickle.dumps(store))
    try:
        await copy.append_run(RUN, 1, 1, b"e1")
        assert (await record(copy)).entries == [b"e0", b"e1"]
        # memory copies the data; sqlite and redis copies are clients of the same data.
        expected = [b"e0"] if kind == "memory" else [b"e0", b"e1"]
        assert (await record(store)).entries == expected
    finally:
        await copy.aclose()

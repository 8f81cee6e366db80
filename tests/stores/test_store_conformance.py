"""The store contract, run on every store: order, atomic batches, fencing, idempotency,
concurrent writers, errors apart from history, malformed data, round-trips, clear."""

from __future__ import annotations

import asyncio
import pickle
from typing import Any

import pytest
from store_support import (
    SHAPES,
    assert_batches_intact,
    batch_of,
    batch_records,
    corrupt_error,
    corrupt_message,
    write_batches,
)

from raygent import AssistantMessage, ProviderBlock, UserMessage
from raygent.errors import ProviderTimeoutError
from raygent.stores import (
    AppendResult,
    CompactingStore,
    PositionConflictError,
    Scope,
    Store,
    StoreDataError,
)

SCOPE = Scope("session-1", "user-1")


def texts(messages: list[Any]) -> list[str]:
    return [m.text for m in messages]


def test_store_implements_the_protocols(store: Any) -> None:
    assert isinstance(store, Store)
    assert isinstance(store, CompactingStore)


async def test_store_appends_in_order_at_contiguous_positions(store: Any) -> None:
    assert await store.load(SCOPE) == []
    first = await store.append(SCOPE, "r1", 0, [UserMessage(content="a")])
    second = await store.append(
        SCOPE, "r1", 1, [AssistantMessage(content="b"), UserMessage(content="c")]
    )
    third = await store.append(SCOPE, "r2", 0, [AssistantMessage(content="d")])
    assert (first, second, third) == (AppendResult(0, 1), AppendResult(1, 2), AppendResult(3, 1))
    assert texts(await store.load(SCOPE)) == ["a", "b", "c", "d"]
    stored = await store.get_conversation(store.ref(SCOPE))
    assert [(s.position, s.run_id, s.turn) for s in stored] == [
        (0, "r1", 0),
        (1, "r1", 1),
        (2, "r1", 1),
        (3, "r2", 0),
    ]


async def test_store_round_trips_every_message_shape(store: Any) -> None:
    for turn, message in enumerate(SHAPES.values()):
        await store.append(SCOPE, "r", turn, [message])
    everything = list(SHAPES.values())
    await store.append(SCOPE, "r", len(SHAPES), everything)
    loaded = await store.load(SCOPE)
    assert loaded == everything + everything
    assert [type(m) for m in loaded] == [type(m) for m in everything + everything]
    assert [s.message for s in await store.get_conversation(store.ref(SCOPE))] == loaded
    assert (await store.snapshot(SCOPE)).messages == loaded
    await store.record_error(SCOPE, "r", {"code": "x"}, everything)
    [record] = await store.errors(SCOPE)
    assert record.messages == everything


async def test_store_writes_nothing_when_a_message_of_the_batch_cannot_be_encoded(
    store: Any,
) -> None:
    await store.append(SCOPE, "r", 0, [UserMessage(content="kept")])
    before = await store.snapshot(SCOPE)
    poisoned = AssistantMessage(
        content=[ProviderBlock(provider="x", kind="y", data={"not json": object()})]
    )
    batch = [UserMessage(content="1"), poisoned, UserMessage(content="3")]
    with pytest.raises(StoreDataError) as caught:
        await store.append(SCOPE, "r", 1, batch)
    assert caught.value.details["batch_index"] == 1
    assert await store.snapshot(SCOPE) == before
    assert (await store.append(SCOPE, "r", 2, [UserMessage(content="next")])).first_position == 1


async def test_store_retry_of_a_committed_batch_writes_nothing(store: Any) -> None:
    batch = [UserMessage(content="q"), AssistantMessage(content="a")]
    assert await store.append(SCOPE, "run", 0, batch) == AppendResult(0, 2)
    await store.append(SCOPE, "run", 1, [UserMessage(content="later")])
    # The retry comes with the stale expected position of the first attempt: still a
    # duplicate, not a conflict.
    retry = await store.append(SCOPE, "run", 0, batch, expected_position=0)
    assert retry == AppendResult(0, 2, duplicate=True)
    assert texts(await store.load(SCOPE)) == ["q", "a", "later"]
    # Same content under another turn or run is a new batch.
    assert (await store.append(SCOPE, "run", 5, batch)).duplicate is False
    assert (await store.append(SCOPE, "other", 0, batch)).duplicate is False
    assert len(await store.load(SCOPE)) == 7


async def test_store_keeps_a_bounded_number_of_batch_ids(store: Any) -> None:
    for turn in range(300):
        await store.append(SCOPE, "r", turn, [UserMessage(content=str(turn))])
    # 256 per conversation; SQLite trims every 32 writes, so it may hold up to 31 more.
    assert 256 <= batch_records(store, SCOPE) < 256 + 32
    recent = await store.append(SCOPE, "r", 100, [UserMessage(content="100")])
    assert recent == AppendResult(100, 1, duplicate=True)


async def test_store_refuses_a_stale_expected_position(store: Any) -> None:
    await store.append(SCOPE, "r", 0, [UserMessage(content="a"), UserMessage(content="b")])
    with pytest.raises(PositionConflictError) as caught:
        await store.append(SCOPE, "r", 1, [UserMessage(content="x")], expected_position=1)
    error = caught.value
    assert (error.expected, error.actual, error.retryable) == (1, 2, True)
    assert error.to_dict()["code"] == "STORE_POSITION_CONFLICT"
    assert error.to_dict()["category"] == "store"
    assert pickle.loads(pickle.dumps(error)).actual == 2
    assert texts(await store.load(SCOPE)) == ["a", "b"]
    ok = await store.append(SCOPE, "r", 1, [UserMessage(content="c")], expected_position=2)
    assert ok == AppendResult(2, 1)
    with pytest.raises(PositionConflictError):
        await store.append(Scope("fresh"), "r", 0, [UserMessage(content="x")], expected_position=1)


async def test_store_concurrent_fenced_writers_never_fork_history(store: Any) -> None:
    writers, batches = 6, 8
    conflicts = await asyncio.gather(
        *(write_batches(store, SCOPE, w, batches) for w in range(writers))
    )
    expected = {(f"w{w}", b): batch_of(w, b) for w in range(writers) for b in range(batches)}
    assert_batches_intact(await store.get_conversation(store.ref(SCOPE)), expected)
    assert sum(conflicts) > 0  # the writers really raced


async def test_store_concurrent_unfenced_batches_never_interleave(store: Any) -> None:
    async def writer(w: int) -> list[AppendResult]:
        return [await store.append(SCOPE, f"w{w}", b, batch_of(w, b)) for b in range(8)]

    results = await asyncio.gather(*(writer(w) for w in range(6)))
    expected = {(f"w{w}", b): batch_of(w, b) for w in range(6) for b in range(8)}
    stored = await store.get_conversation(store.ref(SCOPE))
    assert_batches_intact(stored, expected)
    starts = sorted(r.first_position for rs in results for r in rs)
    assert len(set(starts)) == len(starts)


async def test_store_keeps_errors_apart_from_history(store: Any) -> None:
    await store.append(SCOPE, "r", 0, [UserMessage(content="hi")])
    error = ProviderTimeoutError("slow", provider="openai", status=None)
    await store.record_error(SCOPE, "r", error, [UserMessage(content="pending")])
    await store.record_error(SCOPE, "r2", {"code": "odd", "when": object()})
    assert texts(await store.load(SCOPE)) == ["hi"]
    assert texts((await store.snapshot(SCOPE)).messages) == ["hi"]
    first, second = await store.errors(SCOPE)
    assert first.run_id == "r"
    assert first.error == error.to_dict()
    assert texts(first.messages) == ["pending"]
    assert first.created_at.tzinfo is not None
    assert second.error["code"] == "odd"
    assert isinstance(second.error["when"], str)  # anything JSON cannot hold becomes text
    assert second.messages == []
    assert await store.errors(Scope("elsewhere")) == []
    # Recording errors does not move positions.
    assert (await store.append(SCOPE, "r", 1, [UserMessage(content="x")])).first_position == 1


async def test_store_keeps_the_last_thousand_errors(store: Any) -> None:
    for index in range(1005):
        await store.record_error(SCOPE, "r", {"code": "x", "index": index})
    records = await store.errors(SCOPE)
    assert [r.error["index"] for r in records] == list(range(5, 1005))


async def test_store_reports_malformed_messages_with_scope_and_position(store: Any) -> None:
    await store.append(SCOPE, "r", 0, [UserMessage(content=t) for t in "abc"])
    corrupt_message(store, SCOPE, 1, b'{"role": "wizard", "content": []}')
    for read in (
        lambda: store.load(SCOPE),
        lambda: store.snapshot(SCOPE),
        lambda: store.get_conversation(store.ref(SCOPE)),
    ):
        with pytest.raises(StoreDataError) as caught:
            await read()
        assert caught.value.details["position"] == 1
        assert caught.value.details["ref"] == store.ref(SCOPE)
        assert caught.value.code == "STORE_DATA"
    corrupt_message(store, SCOPE, 1, b"\xc1\xff not any encoding")
    with pytest.raises(StoreDataError) as caught:
        await store.load(SCOPE)
    assert caught.value.details["position"] == 1


async def test_store_reports_malformed_error_records(store: Any) -> None:
    await store.record_error(SCOPE, "r", {"code": "x"})
    corrupt_error(store, SCOPE, b"{not json")
    with pytest.raises(StoreDataError) as caught:
        await store.errors(SCOPE)
    assert caught.value.details["ref"] == store.ref(SCOPE)


async def test_store_clear_removes_history_errors_and_batch_ids(store: Any) -> None:
    other = Scope("session-2")
    batch = [UserMessage(content="x")]
    await store.append(SCOPE, "r", 0, batch)
    await store.append(other, "r", 0, batch)
    await store.record_error(SCOPE, "r", {"code": "x"})
    await store.clear(SCOPE)
    assert await store.load(SCOPE) == []
    assert await store.errors(SCOPE) == []
    assert [c.session_id for c in await store.list_conversations()] == ["session-2"]
    assert batch_records(store, SCOPE) == 0
    assert await store.append(SCOPE, "r", 0, batch) == AppendResult(0, 1)  # not a duplicate
    assert texts(await store.load(other)) == ["x"]
    await store.clear(Scope("never-written"))


async def test_store_refuses_what_is_not_a_batch(store: Any) -> None:
    with pytest.raises(ValueError):
        await store.append(SCOPE, "r", 0, [])
    with pytest.raises(TypeError):
        await store.append(SCOPE, "r", 0, [{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError):
        await store.append(SCOPE, "r", 0, [UserMessage(content="x")], expected_position=-1)
    with pytest.raises(TypeError):
        await store.load("session-1")
    assert await store.load(SCOPE) == []

"""Every store: scopes and tenant isolation, listing and inspection, compaction, expiry
and prune, pickling, and use from more than one event loop."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import ray.cloudpickle as cloudpickle
from store_support import FakeClock, MakeStore

from raygent import AssistantMessage, SystemMessage, UserMessage
from raygent.stores import AppendResult, Scope

SCOPE = Scope("session-1", "user-1")


def texts(messages: list[Any]) -> list[str]:
    return [m.text for m in messages]


def say(text: str) -> list[Any]:
    return [UserMessage(content=text)]


# -- scopes ---------------------------------------------------------------------------


async def test_store_isolates_tenants_by_key_metadata(make_store: MakeStore) -> None:
    store = make_store(key_metadata=("tenant",))
    acme = Scope("s", "u", {"tenant": "acme"})
    globex = Scope("s", "u", {"tenant": "globex"})
    await store.append(acme, "r", 0, say("acme's"))
    await store.append(globex, "r", 0, say("globex's"))
    await store.record_error(acme, "r", {"code": "x"})
    assert texts(await store.load(acme)) == ["acme's"]
    assert texts(await store.load(globex)) == ["globex's"]
    assert await store.errors(globex) == []
    assert await store.load(Scope("s", "u")) == []  # no tenant is a tenant of its own
    # Metadata outside key_metadata is kept for listing but selects nothing.
    traced = Scope("s", "u", {"tenant": "acme", "trace": "t-1"})
    await store.append(traced, "r", 1, say("more"))
    assert texts(await store.load(acme)) == ["acme's", "more"]
    listed = {c.ref: c for c in await store.list_conversations()}
    assert listed[store.ref(acme)].metadata == {"tenant": "acme", "trace": "t-1"}


async def test_store_without_key_metadata_ignores_metadata(make_store: MakeStore) -> None:
    store = make_store()
    await store.append(Scope("s", None, {"tenant": "a"}), "r", 0, say("one"))
    assert texts(await store.load(Scope("s", None, {"tenant": "b"}))) == ["one"]


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (Scope("a:b"), Scope("a", "b")),
        (Scope("a"), Scope("a", "")),
        (Scope("a", "!"), Scope("a")),
        (Scope("a", "b", {"tenant": ""}), Scope("a", "b")),
        (Scope("a", "b:c"), Scope("a:b", "c")),
        (Scope("a%3Ab"), Scope("a:b")),
        (Scope("a", None, {"tenant": "x:y"}), Scope("a:x", None, {"tenant": "y"})),
    ],
    ids=["colon", "empty-user", "bang-user", "empty-tenant", "split", "percent", "tenant"],
)
async def test_store_never_maps_two_scopes_to_one_key(
    make_store: MakeStore, left: Scope, right: Scope
) -> None:
    store = make_store(key_metadata=("tenant",))
    assert store.ref(left) != store.ref(right)
    await store.append(left, "r", 0, say("left"))
    await store.append(right, "r", 0, say("right"))
    assert texts(await store.load(left)) == ["left"]
    assert texts(await store.load(right)) == ["right"]


def test_scope_is_checked_and_hashable() -> None:
    with pytest.raises(ValueError):
        Scope("")
    with pytest.raises(ValueError):
        Scope("s", metadata={"tenant": 1})  # type: ignore[dict-item]
    metadata = {"tenant": "a"}
    scope = Scope("s", "u", metadata)
    metadata["tenant"] = "b"  # the scope kept its own copy
    assert scope.metadata == {"tenant": "a"}
    assert len({scope, Scope("s", "u", {"tenant": "a"})}) == 1


# -- inspection -----------------------------------------------------------------------


async def test_store_lists_conversations_most_recent_first(
    make_store: MakeStore, clock: FakeClock
) -> None:
    store = make_store(clock=clock)
    for name, user in (("old", "ann"), ("mid", "bob"), ("new", "ann")):
        await store.append(Scope(name, user, {"k": name}), "r", 0, say(name) * 2)
        clock.advance(10)
    await store.record_error(Scope("errors-only", "cy"), "r", {"code": "x"})
    listed = await store.list_conversations()
    assert [c.session_id for c in listed] == ["errors-only", "new", "mid", "old"]
    newest = listed[1]
    assert (newest.user_id, newest.metadata, newest.message_count) == ("ann", {"k": "new"}, 2)
    assert newest.updated_at == datetime.fromtimestamp(clock.now - 10, timezone.utc)
    assert newest.scope == Scope("new", "ann", {"k": "new"})
    assert listed[0].message_count == 0
    assert [c.session_id for c in await store.list_conversations(limit=2)] == ["errors-only", "new"]
    by_ann = await store.list_conversations(user_id="ann")
    assert [c.session_id for c in by_ann] == ["new", "old"]
    stored = await store.get_conversation(newest.ref)
    assert [(s.position, s.run_id, s.turn, s.message.text) for s in stored] == [
        (0, "r", 0, "new"),
        (1, "r", 0, "new"),
    ]
    assert stored[0].created_at == datetime.fromtimestamp(clock.now - 10, timezone.utc)


async def test_store_get_conversation_checks_its_ref(store: Any) -> None:
    assert await store.get_conversation(store.ref(Scope("never"))) == []
    for bad in ("", "a b", "x}:m", "*"):
        with pytest.raises(ValueError):
            await store.get_conversation(bad)


# -- compaction -----------------------------------------------------------------------


async def test_store_replaces_a_prefix_at_the_snapshot_revision(store: Any) -> None:
    first = [UserMessage(content=t) for t in "abcd"]
    await store.append(SCOPE, "r", 0, first[:2])
    await store.append(SCOPE, "r", 1, first[2:])
    snapshot = await store.snapshot(SCOPE)
    assert (snapshot.revision, snapshot.messages) == (2, first)
    summary = [SystemMessage(content="summary of a, b, c")]
    assert (
        await store.replace_prefix(SCOPE, snapshot.revision, 3, summary, "compact") == "committed"
    )
    assert texts(await store.load(SCOPE)) == ["summary of a, b, c", "d"]
    stored = await store.get_conversation(store.ref(SCOPE))
    assert [(s.position, s.run_id, s.turn) for s in stored] == [(0, "compact", -1), (1, "r", 1)]
    after = await store.snapshot(SCOPE)
    assert after.revision == 3
    # Appends continue at the new length; a retry of the batch that survived the
    # replace reports where it lives now.
    assert (await store.append(SCOPE, "r", 2, say("e"), expected_position=2)).first_position == 2
    assert await store.append(SCOPE, "r", 1, first[2:]) == AppendResult(0, 2, duplicate=True)
    assert await store.append(SCOPE, "r", 2, say("e")) == AppendResult(2, 1, duplicate=True)
    assert texts(await store.load(SCOPE)) == ["summary of a, b, c", "d", "e"]


async def test_store_replace_conflicts_when_an_append_landed_first(store: Any) -> None:
    await store.append(SCOPE, "r", 0, say("a") + say("b"))
    snapshot = await store.snapshot(SCOPE)
    await store.append(SCOPE, "r", 1, say("c"))  # lands between snapshot and replace
    result = await store.replace_prefix(SCOPE, snapshot.revision, 2, say("ab"), "compact")
    assert result == "conflict"
    assert texts(await store.load(SCOPE)) == ["a", "b", "c"]
    fresh = await store.snapshot(SCOPE)
    assert await store.replace_prefix(SCOPE, fresh.revision, 2, say("ab"), "compact") == "committed"
    assert texts(await store.load(SCOPE)) == ["ab", "c"]
    # A second compactor holding the old revision now loses.
    assert await store.replace_prefix(SCOPE, fresh.revision, 1, [], "compact") == "conflict"


async def test_store_replace_edge_cases(store: Any) -> None:
    await store.append(SCOPE, "r", 0, say("a") + say("b"))
    revision = (await store.snapshot(SCOPE)).revision
    with pytest.raises(ValueError):
        await store.replace_prefix(SCOPE, revision, 3, [], "c")
    # Replacing everything by nothing, then by more than there was.
    assert await store.replace_prefix(SCOPE, revision, 2, [], "c") == "committed"
    assert await store.load(SCOPE) == []
    revision += 1
    many = [AssistantMessage(content=str(i)) for i in range(5)]
    assert await store.replace_prefix(SCOPE, revision, 0, many, "c") == "committed"
    assert texts(await store.load(SCOPE)) == ["0", "1", "2", "3", "4"]
    assert (await store.snapshot(Scope("never"))).revision == 0


# -- expiry and prune -----------------------------------------------------------------


@pytest.mark.kinds("memory", "sqlite", "postgres")
async def test_store_expires_conversations_not_written_for_ttl(
    make_store: MakeStore, clock: FakeClock
) -> None:
    store = make_store(ttl=0.5, clock=clock)
    await store.append(SCOPE, "r", 0, say("a"))
    clock.advance(0.4)
    await store.record_error(SCOPE, "r", {"code": "x"})  # a write: refreshes the ttl
    clock.advance(0.4)
    assert texts(await store.load(SCOPE)) == ["a"]
    clock.advance(0.2)
    assert await store.load(SCOPE) == []
    assert await store.errors(SCOPE) == []
    assert await store.list_conversations() == []
    assert await store.get_conversation(store.ref(SCOPE)) == []
    assert (await store.snapshot(SCOPE)).revision == 0
    # A write after expiry starts a fresh conversation (no duplicate, no old history).
    fresh = await store.append(SCOPE, "r", 0, say("a"), expected_position=0)
    assert fresh == AppendResult(0, 1)
    assert await store.errors(SCOPE) == []


@pytest.mark.kinds("memory", "sqlite", "postgres")
async def test_store_prunes_expired_conversations(make_store: MakeStore, clock: FakeClock) -> None:
    store = make_store(ttl=60, clock=clock)
    await store.append(Scope("old"), "r", 0, say("a"))
    clock.advance(61)
    await store.append(Scope("new"), "r", 0, say("b"))
    assert await store.prune() == 1
    assert await store.prune() == 0
    assert [c.session_id for c in await store.list_conversations()] == ["new"]


async def test_store_prunes_conversations_written_before_a_time(
    make_store: MakeStore, clock: FakeClock
) -> None:
    store = make_store(clock=clock)
    await store.append(Scope("old"), "r", 0, say("a"))
    await store.record_error(Scope("old"), "r", {"code": "x"})
    await store.record_error(Scope("old-error-only"), "r", {"code": "x"})
    clock.advance(100)
    await store.append(Scope("new"), "r", 0, say("b"))
    assert await store.prune() == 0  # no ttl: nothing expires by itself
    assert await store.prune(clock.now - 50) == 2
    assert await store.load(Scope("old")) == []
    assert await store.errors(Scope("old")) == []
    assert [c.session_id for c in await store.list_conversations()] == ["new"]
    moment = datetime.fromtimestamp(clock.now, timezone.utc) + timedelta(seconds=1)
    assert await store.prune(moment) == 1
    assert await store.list_conversations() == []
    with pytest.raises(ValueError):
        await store.prune(datetime(2020, 1, 1))  # naive: which instant?


# -- pickling and event loops ---------------------------------------------------------


async def test_store_pickles_before_and_after_use(make_store: MakeStore, kind: str) -> None:
    fresh = cloudpickle.loads(cloudpickle.dumps(make_store(key_metadata=("tenant",))))
    assert fresh.key_metadata == ("tenant",)
    store = make_store()
    await store.append(SCOPE, "r", 0, say("a"))
    copy = cloudpickle.loads(cloudpickle.dumps(store))
    try:
        await copy.append(SCOPE, "r", 1, say("b"))
        # sqlite, redis and postgres copies are clients of the same data; memory copies the data.
        assert texts(await copy.load(SCOPE)) == ["a", "b"]
        expected = ["a"] if kind == "memory" else ["a", "b"]
        assert texts(await store.load(SCOPE)) == expected
    finally:
        await copy.aclose()
        await fresh.aclose()


async def test_store_works_from_another_event_loop(store: Any) -> None:
    await store.append(SCOPE, "r", 0, say("from the test loop"))

    async def elsewhere() -> list[str]:
        try:
            await store.append(SCOPE, "r", 1, say("from a thread's loop"))
            return texts(await store.load(SCOPE))
        finally:
            await store.aclose()  # closes that loop's client only

    seen = await asyncio.to_thread(asyncio.run, elsewhere())
    assert seen == ["from the test loop", "from a thread's loop"]
    assert texts(await store.load(SCOPE)) == seen


async def test_store_ensure_and_aclose_can_be_repeated(store: Any) -> None:
    await store.ensure()
    await store.ensure()
    await store.append(SCOPE, "r", 0, say("a"))
    await store.aclose()
    await store.aclose()
    assert texts(await store.load(SCOPE)) == ["a"]  # reconnects on use

"""Compaction with memory: the stored history is compacted with the run's conversation
(`snapshot` / `replace_prefix` under the run's lease), retried when another writer moves
the revision first, and later appends still line up."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis
from compaction_support import (
    Interfering,
    Recorder,
    agent_on,
    earlier_runs,
    is_summary,
    signed_block,
    tool_model,
)

import raygent
from raygent import AssistantMessage, ToolMessage, UserMessage
from raygent.compaction.ranges import has_signed_reasoning
from raygent.errors import RaygentError
from raygent.messages import messages_from_msgpack, messages_to_msgpack
from raygent.stores import InMemoryStore, RedisStore, SQLiteStore, Store, StoreUnavailableError
from raygent.stores._codec import (
    decode_envelopes,
    decode_json,
    encode_json,
    encode_msgpack,
    envelope_header,
)


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def make_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[], Store]]:
    kind, prefix = request.param, f"raygent-compact-{uuid.uuid4().hex[:12]}"
    url = request.getfixturevalue("redis_url") if kind == "redis" else None
    made: list[Any] = []

    def make() -> Store:
        store: Store
        if kind == "memory":
            store = InMemoryStore()
        elif kind == "sqlite":
            store = SQLiteStore(tmp_path / "compact.db")
        else:
            store = RedisStore(url, prefix=prefix)
        made.append(store)
        return store

    yield make
    for store in made:
        await store.aclose()
    if url is not None:
        with redis.Redis.from_url(url) as client:
            keys = list(client.scan_iter(match=f"{prefix}:*"))
            if keys:
                client.delete(*keys)


@pytest.mark.parametrize("policy", ["message", "turn"])
async def test_the_stored_history_is_compacted_with_the_run(
    make_store: Callable[[], Store], policy: str
) -> None:
    store = make_store()
    await earlier_runs(store, "s1")
    stored_before = await store.load(raygent.stores.Scope("s1"))
    assert len(stored_before) == 12
    model, summarizer = tool_model(4), Recorder()
    chat = agent_on(store, policy, model, summarizer).session("s1")
    result = await chat.execute("third")
    assert result.ok, result.error
    applied = [d for d in result.report.compactions if d.status == "applied"]
    assert len(applied) >= 2 and all(d.stored for d in applied)
    # The first decision replaced the earlier runs (before this run's input).
    assert summarizer.slices[0] == stored_before[: len(summarizer.slices[0])]
    # The store holds exactly the run's conversation (less the system prompt): every
    # append after a compaction landed where the lease expected it.
    assert result.report.messages is not None
    history = await chat.history()
    assert history == result.report.messages[1:]
    assert len(history) < len(stored_before) + 10
    # The next run starts from the compacted history.
    follow = tool_model(0, answer="ok")
    chat.agent.model = follow
    assert (await chat.execute("fourth")).ok
    first_request, _ = follow.requests[0]
    assert first_request[1:-1] == history
    assert any(is_summary(m, summarizer.text) for m in first_request)


async def test_with_the_run_policy_only_what_is_stored_is_compacted_in_the_store(
    make_store: Callable[[], Store],
) -> None:
    store = make_store()
    await earlier_runs(store, "s2")
    model, summarizer = tool_model(4), Recorder()
    result = await agent_on(store, "run", model, summarizer).session("s2").execute("third")
    assert result.ok, result.error
    applied = [d for d in result.report.compactions if d.status == "applied"]
    # The earlier runs were stored: compacted there too. This run's own turns were not
    # stored yet: compacted in the run only, and saved whole at its end.
    assert applied[0].stored and not any(d.stored for d in applied[1:])
    assert len(applied) >= 2
    history = await store.load(raygent.stores.Scope("s2"))
    # The summary, the earlier answer (keep=2), the input, 4 tool rounds, the answer.
    assert is_summary(history[0], summarizer.text)
    assert history[2] == UserMessage(content="third")
    assert len(history) == 3 + 2 * 4 + 1


async def test_a_moved_revision_is_retried_and_the_run_completes(tmp_path: Path) -> None:
    async def compact_nothing(other: SQLiteStore, scope: Any, revision: int) -> None:
        # Another compactor commits first without changing a message: only the revision.
        assert await other.replace_prefix(scope, revision, 0, [], "other-run") == "committed"

    store = Interfering(tmp_path / "race.db", compact_nothing)
    await earlier_runs(store, "s3")
    chat = agent_on(store, "message", tool_model(3), Recorder()).session("s3")
    result = await chat.execute("third")
    assert result.ok, result.error
    assert store.replaces[:2] == ["conflict", "committed"]
    first = next(d for d in result.report.compactions if d.status == "applied")
    assert first.stored and first.store_conflicts == 1
    assert result.report.messages is not None
    assert await chat.history() == result.report.messages[1:]
    await store.other.aclose()
    await store.aclose()


async def test_a_write_by_another_writer_is_kept_and_the_fence_still_holds(
    tmp_path: Path,
) -> None:
    intruder = UserMessage(content="written by another process")

    async def append(other: SQLiteStore, scope: Any, revision: int) -> None:
        await other.append(scope, "other-run", 0, [intruder])

    store = Interfering(tmp_path / "race.db", append)
    await earlier_runs(store, "s4")
    chat = agent_on(store, "message", tool_model(3), Recorder()).session("s4")
    result = await chat.execute("third")
    # The compaction was retried on the new revision and committed, the other writer's
    # message kept after it; this run's next append then meets the other write and is
    # refused rather than forking the history.
    assert store.replaces[:2] == ["conflict", "committed"]
    assert result.status == "failed"
    assert isinstance(result.error, RaygentError)
    assert result.error.code == "STORE_POSITION_CONFLICT"
    history = await chat.history()
    assert is_summary(history[0], Recorder().text) and history[-1] == intruder
    await store.other.aclose()
    await store.aclose()


class SnapshotFails(InMemoryStore):
    async def snapshot(self, scope: Any) -> Any:
        raise StoreUnavailableError("the store is briefly unreachable")


async def test_an_unreadable_store_leaves_the_stored_history_whole() -> None:
    store = SnapshotFails()
    await earlier_runs(store, "s5")
    stored_before = await store.load(raygent.stores.Scope("s5"))
    chat = agent_on(store, "message", tool_model(3), Recorder()).session("s5")
    result = await chat.execute("third")
    assert result.ok, result.error
    applied = [d for d in result.report.compactions if d.status == "applied"]
    assert applied and not any(d.stored for d in applied)
    # The run compacted alone; the store has every message, verbatim.
    history = await chat.history()
    assert history[: len(stored_before)] == stored_before
    assert len(history) == len(stored_before) + 1 + 2 * 3 + 1


# As every store wrote these messages before messages could carry a compaction marker.
OLD_PAYLOADS = {
    b'{"content":[{"type":"text","text":"hi"}],"role":"user"}': UserMessage(content="hi"),
    b'{"content":[{"type":"text","text":"x"}],"role":"assistant","tool_calls":[]}': (
        AssistantMessage(content="x")
    ),
    b'{"content":[{"type":"text","text":"r"}],"role":"tool","call_id":"c","name":null,'
    b'"is_error":false}': ToolMessage(call_id="c", content="r"),
}


def test_an_unmarked_message_is_encoded_as_before_and_old_payloads_load() -> None:
    for payload, message in OLD_PAYLOADS.items():
        assert encode_json(message) == payload  # no null marker on every stored message
        assert msgpack.unpackb(encode_msgpack(message)) == json.loads(payload)
    assert decode_json("ref", list(OLD_PAYLOADS)) == list(OLD_PAYLOADS.values())
    header = envelope_header("run", 0, 1.0)
    envelopes = [header + msgpack.packb(json.loads(p)) for p in OLD_PAYLOADS]
    assert [e.message for e in decode_envelopes("ref", envelopes)] == list(OLD_PAYLOADS.values())
    marked = UserMessage(content="s", compaction="summary")
    assert b'"compaction":"summary"' in encode_json(marked)
    assert messages_from_msgpack(messages_to_msgpack([marked])) == [marked]


async def test_markers_are_stored_with_the_messages(make_store: Callable[[], Store]) -> None:
    store, scope = make_store(), raygent.stores.Scope("m0")
    messages = [
        UserMessage(content="s", compaction="summary"),
        AssistantMessage(content=[signed_block()], compaction="retained"),
        UserMessage(content="plain"),
    ]
    await store.append(scope, "run", 0, messages)
    assert await store.load(scope) == messages


@pytest.mark.parametrize("policy", ["message", "turn", "run"])
async def test_session_history_shows_the_markers(
    make_store: Callable[[], Store], policy: str
) -> None:
    store = make_store()
    await earlier_runs(store, "m1")
    model = tool_model(4, blocks=lambda trip: [signed_block()])
    chat = agent_on(store, policy, model, Recorder()).session("m1")
    result = await chat.execute("third")
    assert result.ok, result.error
    assert result.report.messages is not None
    history = await chat.history()
    assert [m.compaction for m in history].count("summary") >= 1
    retained = [m for m in result.report.messages if m.compaction == "retained"]
    assert retained and all(has_signed_reasoning(m) for m in retained)
    if policy == "run":
        # This run's own turns are saved whole at its end, the kept ones marked.
        assert all(m in history for m in retained)
    else:
        assert history == result.report.messages[1:]

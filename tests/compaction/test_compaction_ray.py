"""Compaction with memory on the Ray backend: the session host compacts the stored
history under the run's lease (`snapshot` / `replace_prefix` through the host), moves the
lease's fence and its cached history with it, and refuses or reports conflicts as the
local lease does. The scenarios of test_compaction_memory, through session hosts."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

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

from raygent import UserMessage
from raygent.actors import RayOptions, ray_backend
from raygent.actors.sessions.persistence import RaySessions
from raygent.errors import RaygentError
from raygent.seams.contract import Backend
from raygent.stores import RedisStore, Scope, SQLiteStore, Store

pytestmark = pytest.mark.usefixtures("ray_session")


@pytest.fixture(scope="module")
def backend() -> Backend:
    """A Ray backend whose sessions go through the session hosts the Ray session tests
    use (the tests' namespace, 2 hosts: the machine has 2 cores)."""
    options = RayOptions(namespace="raygent-tests")
    return dataclasses.replace(ray_backend(options), sessions=RaySessions(options, hosts=2))


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    made: Store
    if request.param == "sqlite":
        made = SQLiteStore(tmp_path / "compact.db")
    else:
        prefix = f"raygent-compact-{uuid.uuid4().hex[:12]}"
        made = RedisStore(request.getfixturevalue("redis_url"), prefix=prefix)
    yield made
    await made.aclose()
    if isinstance(made, RedisStore):
        with redis.Redis.from_url(made.url) as client:
            keys = list(client.scan_iter(match=f"{made.prefix}:*"))
            if keys:
                client.delete(*keys)


@pytest.mark.parametrize("policy", ["message", "turn"])
async def test_the_host_compacts_the_stored_history_with_the_run(
    store: Store, backend: Backend, policy: str
) -> None:
    await earlier_runs(store, "s1", backend)
    stored_before = await store.load(Scope("s1"))
    assert len(stored_before) == 12
    model, summarizer = tool_model(4), Recorder()
    chat = agent_on(store, policy, model, summarizer, backend).session("s1")
    result = await chat.execute("third")
    assert result.ok, result.error
    applied = [d for d in result.report.compactions if d.status == "applied"]
    assert len(applied) >= 2 and all(d.stored for d in applied)  # in the store, not only the run
    assert summarizer.slices[0] == stored_before[: len(summarizer.slices[0])]
    # The store holds exactly the run's conversation (less the system prompt): each
    # append after a compaction landed where the host's fence expected it.
    assert result.report.messages is not None
    history = await store.load(Scope("s1"))
    assert history == result.report.messages[1:]
    assert len(history) < len(stored_before) + 10
    # The next run (its history from the host's cache) starts from the compacted history.
    follow = tool_model(0, answer="ok")
    chat.agent.model = follow
    assert (await chat.execute("fourth")).ok
    first_request, _ = follow.requests[0]
    assert first_request[1:-1] == history
    assert any(is_summary(m, summarizer.text) for m in first_request)
    after = await chat.history()
    assert after[: len(history) + 1] == [*history, UserMessage(content="fourth")]


async def test_with_the_run_policy_only_what_is_stored_is_compacted_on_the_host(
    store: Store, backend: Backend
) -> None:
    await earlier_runs(store, "s2", backend)
    model, summarizer = tool_model(4), Recorder()
    result = await agent_on(store, "run", model, summarizer, backend).session("s2").execute("go")
    assert result.ok, result.error
    applied = [d for d in result.report.compactions if d.status == "applied"]
    assert len(applied) >= 2
    assert applied[0].stored and not any(d.stored for d in applied[1:])
    history = await store.load(Scope("s2"))
    assert is_summary(history[0], summarizer.text)
    assert history[2] == UserMessage(content="go")
    assert len(history) == 3 + 2 * 4 + 1


async def test_a_moved_revision_is_retried_through_the_host(
    tmp_path: Path, backend: Backend
) -> None:
    async def compact_nothing(other: SQLiteStore, scope: Any, revision: int) -> None:
        # Another compactor commits first without changing a message: only the revision.
        assert await other.replace_prefix(scope, revision, 0, [], "other-run") == "committed"

    store = Interfering(tmp_path / "race.db", compact_nothing)  # the host has its copy
    await earlier_runs(store, "s3", backend)
    chat = agent_on(store, "message", tool_model(3), Recorder(), backend).session("s3")
    result = await chat.execute("third")
    assert result.ok, result.error
    first = next(d for d in result.report.compactions if d.status == "applied")
    assert first.stored and first.store_conflicts == 1
    assert result.report.messages is not None
    assert await chat.history() == result.report.messages[1:]
    await store.other.aclose()
    await store.aclose()


async def test_a_write_around_the_host_is_kept_and_the_fence_still_holds(
    tmp_path: Path, backend: Backend
) -> None:
    intruder = UserMessage(content="written by another process")

    async def append(other: SQLiteStore, scope: Any, revision: int) -> None:
        await other.append(scope, "other-run", 0, [intruder])

    store = Interfering(tmp_path / "race.db", append)
    await earlier_runs(store, "s4", backend)
    chat = agent_on(store, "message", tool_model(3), Recorder(), backend).session("s4")
    result = await chat.execute("third")
    # Retried on the new revision and committed, the other write kept after it; the
    # run's next append then meets that write and is refused: the history never forks.
    assert result.status == "failed"
    assert isinstance(result.error, RaygentError)
    assert result.error.code == "STORE_POSITION_CONFLICT"
    history = await chat.history()
    assert is_summary(history[0], Recorder().text) and history[-1] == intruder
    # The host let go of its copy: the next run starts from what the store holds.
    follow = tool_model(0, answer="ok")
    chat.agent.model = follow
    assert (await chat.execute("again")).ok
    first_request, _ = follow.requests[0]
    assert first_request[1:-1] == history
    await store.other.aclose()
    await store.aclose()


@pytest.mark.parametrize("policy", ["message", "run"])
async def test_the_markers_reach_the_store_and_the_hosts_copy(
    store: Store, backend: Backend, policy: str
) -> None:
    await earlier_runs(store, "s5", backend)
    model = tool_model(4, blocks=lambda trip: [signed_block()])
    chat = agent_on(store, policy, model, Recorder(), backend).session("s5")
    result = await chat.execute("third")
    assert result.ok, result.error
    assert result.report.messages is not None
    retained = [m for m in result.report.messages if m.compaction == "retained"]
    assert retained
    history = await store.load(Scope("s5"))
    assert [m.compaction for m in history].count("summary") >= 1
    assert all(m in history for m in retained)
    if policy == "message":
        assert history == result.report.messages[1:]
    # The next run's history (from the host's cache) carries them too.
    follow = tool_model(0, answer="ok")
    chat.agent.model, chat.agent.compaction = follow, None
    assert (await chat.execute("fourth")).ok
    first_request, _ = follow.requests[0]
    assert first_request[1:-1] == history

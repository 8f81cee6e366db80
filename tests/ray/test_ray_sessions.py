"""Sessions on the Ray backend: runs take their turn from the session hosts (leases,
cached histories), write to SQLite files and the real Redis themselves, fenced, and hand
back what they appended.

In-memory stores are per process, so hosts are tested on SQLite and Redis only; an
in-memory store on the Ray backend is served in the driver (checked here too).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import ray
from session_support import (
    InProcess,
    SessionDriver,
    check_unforked,
    delete_store,
    fresh_namespace,
    make_store,
    note,
    roles_and_turns,
    sessions_backend,
    tool_agent,
)

import raygent
from raygent import AssistantMessage, Memory, Message, UserMessage
from raygent.actors.sessions import persistence as sessions_module
from raygent.actors.sessions.host import SessionHost
from raygent.actors.sessions.lease import HostLease
from raygent.actors.sessions.persistence import (
    LeaseExpiredError,
    RaySessions,
    SessionHostError,
    encode_messages,
    route,
    store_identity,
)
from raygent.errors import ServerError
from raygent.messages import messages_from_json
from raygent.stores import (
    InMemoryStore,
    PositionConflictError,
    RedisStore,
    Scope,
    SQLiteStore,
    Store,
    StoreUnavailableError,
)
from raygent.testing import FunctionModel, ScriptedModel, call, reply

pytestmark = pytest.mark.usefixtures("ray_session")

HOSTS = 2  # the shared hosts of this module (a small pool: the machine has 2 cores)


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    made = make_store(request.param, tmp_path, url)
    yield made
    await made.aclose()
    delete_store(made)


@pytest.fixture
async def redis_store(redis_url: str, tmp_path: Path) -> AsyncIterator[Store]:
    made = make_store("redis", tmp_path, redis_url)
    yield made
    await made.aclose()
    delete_store(made)


def _identity(store: Store) -> tuple[str, Store]:
    found = store_identity(store)
    assert found is not None
    return found


def _host_of(sessions: RaySessions, store: Store, scope: Scope) -> Any:
    key, _ = _identity(store)
    return sessions.start()[route(key, store.ref(scope), sessions.hosts)]


# -- the save policies, through the hosts ---------------------------------------------

EXPECTED: dict[str, list[tuple[str, int]]] = {
    # run 1: prompt, tool turn, answer; run 2: prompt, tool turn, then the model fails.
    "message": [
        *[("user", 0), ("assistant", 1), ("tool", 1), ("assistant", 2)],
        *[("user", 0), ("assistant", 1), ("tool", 1)],
    ],
    "turn": [
        *[("user", 0), ("assistant", 0), ("tool", 0), ("assistant", 1)],
        *[("user", 0), ("assistant", 0), ("tool", 0)],
    ],
    "run": [("user", 0), ("assistant", 0), ("tool", 0), ("assistant", 0)],
}


@pytest.mark.parametrize("policy", ["message", "turn", "run"])
async def test_save_policies_hold_through_the_hosts(store: Store, policy: Any) -> None:
    backend, _ = sessions_backend(hosts=HOSTS)
    model = ScriptedModel(
        [
            reply(tool_calls=[call("note", {"text": "a"})]),
            "first done",
            reply(tool_calls=[call("note", {"text": "b"})]),
            ServerError("provider down", provider="test", status=503),
        ]
    )
    bot = raygent.agent(model=model, tools=[note], backend=backend, memory=Memory(store, policy))
    session = bot.session(f"policy-{policy}")

    first = await session.execute("first")
    assert first.ok, first.error
    after_success = await store.get_conversation(store.ref(session.scope))
    assert [m.message.text for m in after_success][-1] == "first done"
    assert len(after_success) == 4 and {m.run_id for m in after_success} == {first.report.run_id}

    second = await session.execute("second")
    assert not second.ok and isinstance(second.error, ServerError)
    assert len(model.requests[2][0]) == 5  # run 2 started from run 1's stored history
    stored = await store.get_conversation(store.ref(session.scope))
    assert roles_and_turns(stored) == EXPECTED[policy]
    check_unforked(stored)
    errors = await session.errors()
    assert [(e.run_id, e.error["code"]) for e in errors] == [
        (second.report.run_id, "PROVIDER_SERVER_ERROR")
    ]
    assert await session.history() == [m.message for m in stored]  # errors never in history


# -- order and exclusion ---------------------------------------------------------------


async def test_runs_from_one_driver_go_in_arrival_order(store: Store) -> None:
    backend, _ = sessions_backend(hosts=HOSTS)
    seen: list[tuple[str, int]] = []

    async def model(messages: list[Message], options: Any) -> Any:
        if messages[-1].role == "user":
            seen.append((messages[-1].text, len(messages)))
            await asyncio.sleep(0.002)  # a slow trip: a run not kept out would interleave
            return reply(tool_calls=[call("note", {"text": messages[-1].text})])
        return "done"

    bot = raygent.agent(
        model=FunctionModel(model), tools=[note], backend=backend, memory=Memory(store, "message")
    )
    session = bot.session("arrival")
    prompts = [f"run {i}" for i in range(12)]
    results = await asyncio.gather(*(session.execute(p) for p in prompts))
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    # Each run saw every earlier run's four messages, in the order the runs arrived.
    assert seen == [(p, 4 * i + 1) for i, p in enumerate(prompts)]
    stored = await store.get_conversation(store.ref(session.scope))
    runs = check_unforked(stored)
    assert [runs[r.report.run_id][0] for r in results] == [4 * i for i in range(12)]


async def test_two_drivers_on_one_session_never_fork(redis_store: Store) -> None:
    backend, sessions = sessions_backend(hosts=HOSTS)
    sessions.start()  # the driver owns the hosts, not a runner that ends first
    agent = tool_agent(backend, redis_store, "message")
    drivers = [SessionDriver.remote() for _ in range(2)]  # type: ignore[attr-defined]
    prompts = [[f"driver {d} run {r}" for r in range(6)] for d in range(2)]
    try:
        outcomes = await asyncio.gather(
            *(d.run.remote(agent, "shared", p) for d, p in zip(drivers, prompts, strict=True))
        )
    finally:
        for d in drivers:
            ray.kill(d)
    assert all(o == ("completed", None) for batch in outcomes for o in batch), outcomes
    stored = await redis_store.get_conversation(redis_store.ref(Scope("shared")))
    runs = check_unforked(stored)
    assert len(runs) == 12 and all(len(p) == 4 for p in runs.values())  # no run lost
    users = sorted(m.message.text for m in stored if m.message.role == "user")
    assert users == sorted(p for batch in prompts for p in batch)
    # Each run's answer names how long the history it saw was: exactly what was stored.
    for first in sorted(p[0] for p in runs.values()):
        assert stored[first + 3].message.text == f"answer after {first + 3} messages"


# -- host failure, lease expiry ----------------------------------------------------------


async def _restarted(host: Any, incarnation: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            stats: dict[str, Any] = await host.stats.remote()
            if stats["incarnation"] != incarnation:
                return stats
        except ray.exceptions.RayActorError:
            pass
        assert time.monotonic() < deadline, "the session host did not come back"
        await asyncio.sleep(0.1)


async def test_a_killed_host_does_not_fail_its_run_and_serves_the_stored_history(
    redis_store: Store,
) -> None:
    backend, sessions = sessions_backend(fresh_namespace(), hosts=1)
    [host] = sessions.start()
    entered, go_on = asyncio.Event(), asyncio.Event()

    async def model(messages: list[Message], options: Any) -> Any:
        if messages[-1].text == "first":
            entered.set()
            await go_on.wait()
        return f"seen {len(messages)}"

    bot = raygent.agent(
        model=FunctionModel(model), backend=backend, memory=Memory(redis_store, "message")
    )
    session = bot.session("killed")
    running = asyncio.create_task(session.execute("first"))
    await asyncio.wait_for(entered.wait(), 20)  # the prompt is stored, the lease held
    before = await host.stats.remote()
    assert before["leases"] == 1
    ray.kill(host, no_restart=False)
    after = await _restarted(host, before["incarnation"])
    assert after["leases"] == 0 and after["cached_sessions"] == 0  # it starts cold
    go_on.set()  # the run writes its answer itself, fenced by the store
    result = await asyncio.wait_for(running, 30)
    assert result.ok and result.text == "seen 1", result.error
    assert [m.text for m in await session.history()] == ["first", "seen 1"]
    assert await session.errors() == []
    again = await session.execute("second")
    assert again.ok and again.text == "seen 3", again.error  # reloaded from the store


async def test_a_turn_taken_after_a_host_restart_cannot_fork_the_history(
    redis_store: Store,
) -> None:
    _, sessions = sessions_backend(fresh_namespace(), hosts=1)
    [host] = sessions.start()
    memory, scope = Memory(redis_store), Scope("restarted")
    stale = await sessions.acquire(memory, scope, "before-the-restart")
    incarnation = (await host.stats.remote())["incarnation"]
    ray.kill(host, no_restart=False)
    await _restarted(host, incarnation)
    # Another driver's run: the restarted host has forgotten the stale lease.
    key, shipped = _identity(redis_store)
    fresh = await host.acquire.remote(key, scope, "after-the-restart", 60, shipped)
    assert isinstance(fresh, tuple)
    await redis_store.append(scope, "after-the-restart", 0, [UserMessage(content="new")], 0)
    with pytest.raises(PositionConflictError):  # the stale run finds the position moved
        await stale.append(0, [UserMessage(content="the old turn")])
    await stale.release()
    assert [m.text for m in await redis_store.load(scope)] == ["new"]


async def test_an_abandoned_lease_expires_and_no_longer_blocks(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "leases.db")
    backend, sessions = sessions_backend(hosts=HOSTS, lease_timeout=0.5)
    scope = Scope("abandoned")
    host = _host_of(sessions, store, scope)
    key, shipped = _identity(store)
    # A driver that took the lease and died: no release, no renewal.
    lease_id, history = await host.acquire.remote(key, scope, "dead-driver", 0.5, shipped)
    assert history == b"[]"
    expired = (await host.stats.remote())["expired_leases"]

    bot = raygent.agent(
        model=FunctionModel(lambda m, o: "ok"), backend=backend, memory=Memory(store, "message")
    )
    started = time.monotonic()
    result = await bot.session("abandoned").execute("hi")
    assert result.ok, result.error
    assert time.monotonic() - started < 10
    assert (await host.stats.remote())["expired_leases"] == expired + 1
    late = await host.release.remote(lease_id, encode_messages([UserMessage(content="late")]), 1)
    assert isinstance(late, LeaseExpiredError) and late.code == "SESSION_LEASE_EXPIRED"
    assert [m.text for m in await store.load(scope)] == ["hi", "ok"]
    await store.aclose()


async def test_a_live_run_keeps_its_lease_through_a_long_model_call(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "long.db")
    backend, _ = sessions_backend(hosts=HOSTS, lease_timeout=1.0)

    async def slow(messages: list[Message], options: Any) -> str:
        await asyncio.sleep(2.5)  # > lease_timeout, with no write in between
        return "slow answer"

    bot = raygent.agent(model=FunctionModel(slow), backend=backend, memory=Memory(store, "run"))
    result = await bot.session("long").execute("take your time")
    assert result.ok, result.error
    assert [m.text for m in await store.load(Scope("long"))] == ["take your time", "slow answer"]
    await store.aclose()


async def test_a_run_cancelled_while_queued_leaves_no_lease_behind(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "cancel.db")
    _, sessions = sessions_backend(hosts=HOSTS)
    memory, scope = Memory(store), Scope("cancelled")
    host = _host_of(sessions, store, scope)
    key, shipped = _identity(store)
    holder, _ = await host.acquire.remote(key, scope, "another-driver", 60, shipped)
    queued = asyncio.create_task(sessions.acquire(memory, scope, "impatient"))
    await asyncio.sleep(0.3)
    assert not queued.done()  # waiting at the host
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    await host.release.remote(holder, None, None)
    # The cancelled run's lease is granted after all, and released at once: the next
    # run does not wait for it to expire (60 s).
    lease = await asyncio.wait_for(sessions.acquire(memory, scope, "next"), 10)
    await lease.release()
    assert (await host.stats.remote())["leases"] == 0
    await store.aclose()


# -- typed errors through Ray -------------------------------------------------------------


async def test_store_errors_come_back_typed_and_a_conflict_reloads(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "typed.db")
    _, sessions = sessions_backend(hosts=HOSTS)
    memory, scope = Memory(store), Scope("typed")
    lease = await sessions.acquire(memory, scope, "run-1")
    await lease.append(0, [UserMessage(content="one")])
    await store.append(scope, "intruder", 0, [UserMessage(content="around the host")], 1)
    with pytest.raises(PositionConflictError) as conflict:
        await lease.append(1, [AssistantMessage(content="two")])
    assert (conflict.value.expected, conflict.value.actual) == (1, 2)
    with pytest.raises(TypeError):  # not a store error: unwrapped from RayTaskError
        await lease.append(2, ["not a message"])  # type: ignore[list-item]
    await lease.release()
    again = await sessions.acquire(memory, scope, "run-2")  # the conflict dropped the cache
    assert [m.text for m in again.history] == ["one", "around the host"]
    await again.release()
    await store.clear(scope)  # around the hosts again: say so, and nothing conflicts
    await sessions.forget(memory, scope)
    cleared = await sessions.acquire(memory, scope, "run-3")
    assert cleared.history == []
    await cleared.append(0, [UserMessage(content="anew")])
    await cleared.release()
    await store.aclose()

    unreachable = Memory(RedisStore("redis://127.0.0.1:1/0", prefix="nowhere"))
    with pytest.raises(StoreUnavailableError):
        await sessions.acquire(unreachable, scope, "run-4")


async def test_in_memory_stores_are_served_in_this_process() -> None:
    backend, _ = sessions_backend(hosts=HOSTS)
    store = InMemoryStore()
    bot = raygent.agent(
        model=FunctionModel(lambda m, o: f"seen {len(m)}"), backend=backend, memory=Memory(store)
    )
    session = bot.session("in-memory")
    assert (await session.execute("a")).text == "seen 1"
    assert (await session.execute("b")).text == "seen 3"
    assert len(await store.load(session.scope)) == 4


# -- many idle sessions -------------------------------------------------------------------


async def test_many_idle_sessions_stay_within_the_cache_bound(redis_store: Store) -> None:
    # 2,000 sessions through two hosts that cache 400 each (about 6 ms of CPU a session
    # on 2 cores: the benchmark goes to 100k).
    _, sessions = sessions_backend(fresh_namespace(), hosts=2, max_cached=400)
    sessions.start()
    memory, count, limit = Memory(redis_store), 2_000, asyncio.Semaphore(128)

    async def one(i: int) -> None:
        async with limit:
            lease = await sessions.acquire(memory, Scope(f"idle-{i}"), f"run-{i}")
            await lease.append(0, [UserMessage(content=f"hi {i}"), AssistantMessage(content="hi")])
            await lease.release()

    await asyncio.gather(*(one(i) for i in range(count)))
    stats = await sessions.stats()
    assert [s["leases"] for s in stats] == [0, 0] and [s["gates"] for s in stats] == [0, 0]
    assert all(s["cached_sessions"] == 400 for s in stats)  # both hosts got > 400
    assert all(0 < s["cached_bytes"] < 400 * 200 for s in stats)  # ~100 bytes of JSON each
    gc.collect()
    assert not sessions_module._locks.get(asyncio.get_running_loop())  # no idle locks
    # An evicted session reloads from the store.
    lease = await sessions.acquire(memory, Scope("idle-0"), "again")
    assert [m.text for m in lease.history] == ["hi 0", "hi"]
    await lease.release()


# -- the host itself, in this process -------------------------------------------------------


class CountingStore(InMemoryStore):
    """Counts loads: a history served from a host's cache is not loaded."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    async def load(self, scope: Scope) -> list[Message]:
        self.loads += 1
        return await super().load(scope)


async def test_host_grants_in_arrival_order_and_bounds_its_cache() -> None:
    host, store = SessionHost(max_cached=2), CountingStore()
    key = "k"
    first = await host.acquire(key, Scope("a"), "r1", 60, store)
    assert isinstance(first, tuple)
    waiting = [asyncio.create_task(host.acquire(key, Scope("a"), f"r{i}", 60)) for i in (2, 3)]
    await asyncio.sleep(0.01)
    assert not any(t.done() for t in waiting)
    # The same run asking again (its answer lost on the way) gets the lease it holds.
    assert await host.acquire(key, Scope("a"), "r1", 60) == first
    await store.append(Scope("a"), "r1", 0, [UserMessage(content="x")], 0)  # the run writes
    await host.release(first[0], encode_messages([UserMessage(content="x")]), 1)
    second = await waiting[0]
    assert isinstance(second, tuple)
    assert messages_from_json(second[1]) == [UserMessage(content="x")]
    assert store.loads == 1  # served from the copy, extended by what r1 appended
    assert not waiting[1].done()
    await host.release(second[0], b"[]", 1)
    third = await waiting[1]
    assert isinstance(third, tuple)
    await host.release(third[0], b"[]", 1)
    for name in ("b", "c"):
        granted = await host.acquire(key, Scope(name), "r", 60)
        assert isinstance(granted, tuple)
        await host.release(granted[0], b"[]", 0)
    stats = await host.stats()
    assert (stats["cached_sessions"], stats["leases"], stats["gates"]) == (2, 0, 0)

    small, store = SessionHost(max_cached_bytes=100), CountingStore()  # ~50 bytes a message
    for name in ("a", "b", "c"):
        granted = await small.acquire(key, Scope(name), "r", 60, store)
        assert isinstance(granted, tuple)
        await store.append(Scope(name), "r", 0, [UserMessage(content=name)], 0)
        await small.release(granted[0], encode_messages([UserMessage(content=name)]), 1)
    stats = await small.stats()
    assert stats["cached_bytes"] <= 100 and stats["cached_sessions"] < 3


async def test_host_refuses_expired_and_foreign_leases() -> None:
    host, store = SessionHost(), InMemoryStore()
    granted = await host.acquire("k", Scope("a"), "r1", 0.05, store)
    assert isinstance(granted, tuple)
    await asyncio.sleep(0.15)
    assert isinstance(await host.release(granted[0], b"[]", 0), LeaseExpiredError)
    other = SessionHost()
    refused = await other.release(granted[0], None, None)
    assert type(refused) is SessionHostError  # another incarnation: the host restarted
    assert await host.acquire("unknown", Scope("a"), "r2", 60) is None  # send the store


def _said(*texts: str) -> list[Message]:
    return [UserMessage(content=t) for t in texts]


async def test_a_run_compacts_under_its_lease_and_the_host_reloads_what_it_made() -> None:
    host, store, scope = SessionHost(), CountingStore(), Scope("c")
    handle = InProcess(host)
    await store.append(scope, "earlier", 0, _said("a", "b", "c"))

    async def lease_of(run_id: str) -> HostLease:
        sent = time.monotonic()
        granted = await host.acquire("k", scope, run_id, 60, store)
        assert isinstance(granted, tuple)
        history = messages_from_json(granted[1])
        return HostLease(
            handle, "h", granted[0], history, store, scope, run_id, asyncio.Lock(), 60, sent
        )

    lease = await lease_of("r1")
    await lease._lock.acquire()  # type: ignore[union-attr]  # as RaySessions does
    snapshot = await lease.snapshot()
    assert snapshot.messages == _said("a", "b", "c")
    summary = [AssistantMessage(content="a and b")]
    # A revision that moved: a conflict, nothing written, the fence where it was.
    assert await lease.replace_prefix(snapshot.revision + 1, 2, summary) is False
    assert await store.load(scope) == _said("a", "b", "c")
    assert await lease.replace_prefix(snapshot.revision, 2, summary) is True
    # The fence moved by what the replacement changed: the next append lines up.
    await lease.append(0, _said("d"))
    await lease.release()
    assert handle.calls["release"] == 1  # the run's only host call after the grant
    compacted = [*summary, *_said("c", "d")]
    assert await store.load(scope) == compacted
    loads = store.loads
    again = await lease_of("r2")
    assert again.history == compacted  # the host dropped its copy and reloaded this one
    assert store.loads == loads + 1
    await again._lock.acquire()  # type: ignore[union-attr]
    await again.append(0, _said("e"))
    await again.release()
    third = await lease_of("r3")
    assert third.history == [*compacted, *_said("e")]  # extended, not reloaded
    assert store.loads == loads + 1


async def test_a_lease_past_its_deadline_refuses_writes_without_touching_the_store() -> None:
    host, store, scope = SessionHost(), CountingStore(), Scope("late")
    sent = time.monotonic()
    granted = await host.acquire("k", scope, "r1", 0.05, store)
    assert isinstance(granted, tuple)
    lease = HostLease(
        InProcess(host), "h", granted[0], [], store, scope, "r1", asyncio.Lock(), 0.05, sent
    )
    await asyncio.sleep(0.1)
    with pytest.raises(LeaseExpiredError):
        await lease.append(0, _said("too late"))
    assert await store.load(scope) == []

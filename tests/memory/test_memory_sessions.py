"""Sessions: load, run, save; runs on one session in arrival order, other sessions free;
history / errors / clear; scope isolation; `execute(session_id=...)`; the default
SQLite file; nested agents; runs from other threads."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from backend_support import Hanging
from memory_support import (
    POLICIES,
    Held,
    assistant,
    drain,
    expected_run,
    lookup,
    shapes,
    user,
)

import raygent
from raygent import AbortController, Memory, ModelOptions
from raygent.errors import AgentCancelledError, InvalidOptionsError, ServerError
from raygent.memory import LocalSessions
from raygent.messages import Message, ToolMessage
from raygent.seams.local import LOCAL
from raygent.stores import InMemoryStore, Scope, SQLiteStore
from raygent.testing import FunctionModel, ScriptedModel, call, reply

SCOPE = Scope("s1")


@pytest.fixture(params=POLICIES)
def policy(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def memory_of(store: Any, policy: str = "message") -> Memory:
    return Memory(store, save_policy=policy)  # type: ignore[arg-type]


async def test_the_second_run_sees_what_the_first_stored(store: Any, policy: str) -> None:
    model = ScriptedModel(
        [reply(tool_calls=[call("lookup", {"q": "x"}, call_id="c1")]), "first", "second"]
    )
    bot = raygent.agent(model=model, tools=[lookup], memory=memory_of(store, policy))
    session = bot.session("s1")
    assert (await session.execute("one")).ok
    assert (await session.execute("two")).ok
    sent, _ = model.requests[2]
    first = [
        user("one"),
        assistant("", "c1"),
        ("tool", "c1", "found x", False),
        assistant("first"),
    ]
    assert shapes(sent) == [*first, user("two")]
    assert shapes(await session.history()) == [*first, user("two"), assistant("second")]


class Probe:
    """A model for concurrent runs: the first trip calls `lookup` with the input, the
    second answers; it records, per request, the input and how much history it saw, and
    yields to the loop on every request so that runs could interleave if they were
    allowed to."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    async def __call__(self, messages: list[Message], options: ModelOptions) -> Any:
        for _ in range(3):
            await asyncio.sleep(0)  # a yield, not a wait
        last = messages[-1]
        if isinstance(last, ToolMessage):
            self.seen.append((last.text.removeprefix("found "), len(messages)))
            return reply(f"answer {last.text}")
        self.seen.append((last.text, len(messages)))
        return reply(tool_calls=[call("lookup", {"q": last.text}, call_id=f"c-{last.text}")])


async def test_concurrent_runs_on_one_session_go_in_arrival_order(store: Any, policy: str) -> None:
    probe = Probe()
    bot = raygent.agent(model=FunctionModel(probe), tools=[lookup], memory=memory_of(store, policy))
    session = bot.session("s1")
    texts = [f"r{i}" for i in range(6)]
    results = await asyncio.gather(*(session.execute(text) for text in texts))
    assert all(r.ok for r in results), [r.error for r in results]
    # Run i saw the 4 messages of each earlier run, then its input (and its tool turn).
    assert probe.seen == [
        seen for i, text in enumerate(texts) for seen in ((text, 4 * i + 1), (text, 4 * i + 3))
    ]
    expected = [shape for text in texts for shape in expected_run(text)]
    assert shapes(await session.history()) == expected
    stored = await store.get_conversation(store.ref(SCOPE))
    assert [s.run_id for s in stored] == [r.report.run_id for r in results for _ in range(4)]


async def test_a_run_waits_for_the_earlier_run_on_its_session(store: Any) -> None:
    held = Held(answer="first done")
    seen: list[list[tuple[Any, ...]]] = []

    def later(messages: list[Message], options: ModelOptions) -> str:
        seen.append(shapes(messages))
        return "second done"

    memory = memory_of(store)
    first = raygent.agent(model=FunctionModel(held), memory=memory).session("s1")
    second = raygent.agent(model=FunctionModel(later), memory=memory).session("s1")
    one = asyncio.ensure_future(first.execute("one"))
    await held.arrived.wait()
    two = asyncio.ensure_future(second.execute("two"))
    # A whole run on another session, meanwhile: the queued run has not started.
    other = raygent.agent(model=ScriptedModel(["other"]), memory=memory).session("s2")
    assert (await asyncio.wait_for(other.execute("x"), 10)).ok
    assert seen == [] and not two.done()
    held.release.set()
    assert (await one).ok and (await two).ok
    assert seen == [[user("one"), assistant("first done"), user("two")]]


async def test_runs_on_other_sessions_do_not_wait(store: Any) -> None:
    held = Held()
    memory = memory_of(store)
    stuck = asyncio.ensure_future(
        raygent.agent(model=FunctionModel(held), memory=memory).session("s1").execute("one")
    )
    await held.arrived.wait()
    bot = raygent.agent(model=ScriptedModel(["a", "b"]), memory=memory)
    # Other session ids, and the same id for another user: neither waits for s1.
    assert (await asyncio.wait_for(bot.session("s2").execute("x"), 10)).ok
    assert (await asyncio.wait_for(bot.session("s1", user_id="u").execute("y"), 10)).ok
    assert not stuck.done()
    held.release.set()
    assert (await stuck).ok


async def test_an_aborted_queued_run_ends_at_once_and_stores_nothing(store: Any) -> None:
    held = Held(answer="first done")
    memory = memory_of(store)
    first = raygent.agent(model=FunctionModel(held), memory=memory).session("s1")
    second = raygent.agent(model=ScriptedModel(["never"]), memory=memory).session("s1")
    one = asyncio.ensure_future(first.execute("one"))
    await held.arrived.wait()
    controller = AbortController()
    two = asyncio.ensure_future(second.execute("two", signal=controller.signal))
    controller.abort("changed my mind")
    queued = await asyncio.wait_for(two, 10)  # not after the first run: now
    assert isinstance(queued.error, AgentCancelledError)
    assert queued.error.details["reason"] == "changed my mind"
    assert not one.done()
    held.release.set()
    assert (await one).ok
    assert shapes(await first.history()) == [user("one"), assistant("first done")]
    [record] = await first.errors()
    assert (record.run_id, record.error["code"]) == (queued.report.run_id, "AGENT_CANCELLED")


async def test_a_cancelled_queued_run_is_recorded(store: Any) -> None:
    held = Held(answer="first done")
    memory = memory_of(store)
    first = raygent.agent(model=FunctionModel(held), memory=memory).session("s1")
    one = asyncio.ensure_future(first.execute("one"))
    await held.arrived.wait()
    started = asyncio.Event()
    two = asyncio.ensure_future(
        first.execute("two", on={"agent.starting": lambda e: started.set()})
    )
    await started.wait()
    two.cancel()
    with pytest.raises(asyncio.CancelledError):
        await two
    held.release.set()
    assert (await one).ok
    assert shapes(await first.history()) == [user("one"), assistant("first done")]
    [record] = await first.errors()
    assert record.error["code"] == "AGENT_CANCELLED"


async def test_history_errors_and_clear(store: Any) -> None:
    steps = ["hello", ServerError("down", provider="test")]
    session = raygent.agent(model=ScriptedModel(steps), memory=memory_of(store)).session("s1")
    ok = await session.execute("hi")
    failed = await session.execute("again")
    assert ok.ok and failed.report.status == "failed"
    assert shapes(await session.history()) == [user("hi"), assistant("hello"), user("again")]
    [record] = await session.errors()
    assert record.run_id == failed.report.run_id
    assert shapes(record.messages) == [user("again")]
    await session.clear()
    assert await session.history() == []
    assert await session.errors() == []


async def test_user_and_key_metadata_isolate_conversations(make_store: Any) -> None:
    store = make_store(key_metadata=("tenant",))
    bot = raygent.agent(
        model=FunctionModel(lambda messages, options: f"saw {len(messages)}"),
        memory=memory_of(store),
    )
    sessions = {
        "plain": bot.session("s"),
        "ada": bot.session("s", user_id="ada"),
        "bob": bot.session("s", user_id="bob"),
        "t1": bot.session("s", metadata={"tenant": "t1"}),
        "t2": bot.session("s", metadata={"tenant": "t2"}),
        "ada-t1": bot.session("s", user_id="ada", metadata={"tenant": "t1", "note": "a"}),
    }
    for name, session in sessions.items():
        assert (await session.execute(name)).ok
    # Non-key metadata does not select a conversation: same as ada-t1.
    same = bot.session("s", user_id="ada", metadata={"tenant": "t1", "note": "b"})
    assert (await same.execute("again")).ok
    for name, session in sessions.items():
        expected = [user(name), assistant("saw 1")]
        if name == "ada-t1":
            expected += [user("again"), assistant("saw 3")]
        assert shapes(await session.history()) == expected, name
        assert await session.errors() == []


async def test_execute_with_a_session_id_persists_like_a_session(store: Any) -> None:
    model = ScriptedModel(["one", "two", "three"])
    bot = raygent.agent(model=model, memory=memory_of(store))
    first = await bot.execute("a", session_id="s1", user_id="ada")
    assert first.ok and first.report.session_id == "s1"
    session = bot.session("s1", user_id="ada")
    assert (await session.execute("b")).ok
    assert (await bot.execute("c", session_id="s1", user_id="ada")).ok
    assert shapes(model.requests[2][0]) == [
        user("a"),
        assistant("one"),
        user("b"),
        assistant("two"),
        user("c"),
    ]
    assert len(await session.history()) == 6
    # No session id: nothing stored anywhere.
    plain = raygent.agent(model=ScriptedModel(["x"]), memory=memory_of(store))
    assert (await plain.execute("x")).ok
    assert {c.session_id for c in await store.list_conversations()} == {"s1"}


async def test_a_session_stream_saves_like_execute(store: Any, policy: str) -> None:
    model = ScriptedModel(["streamed one", "streamed two"])
    session = raygent.agent(model=model, memory=memory_of(store, policy)).session("s1")
    events, first = await drain(session.stream("one"))
    assert first.ok and events[-1].type == "agent.completed"
    _, second = await drain(session.stream("two"))
    assert second.ok
    assert shapes(model.requests[1][0]) == [user("one"), assistant("streamed one"), user("two")]
    assert len(await session.history()) == 4


async def test_without_memory_a_session_uses_raygent_db_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    bot = raygent.agent(model=ScriptedModel(["stored"]))
    session = bot.session("s1", user_id="ada")
    assert bot.memory is not None
    assert bot.memory.save_policy == "message"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # the file stays where the session began
    try:
        assert (await session.execute("hi")).ok
        assert (tmp_path / "raygent.db").exists()
        reader = SQLiteStore(tmp_path / "raygent.db")
        try:
            loaded = await reader.load(Scope("s1", "ada"))
        finally:
            await reader.aclose()
        assert shapes(loaded) == [user("hi"), assistant("stored")]
    finally:
        await bot.memory.store.aclose()


async def test_execute_sync_on_a_session(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "sync.db")
    session = raygent.agent(model=ScriptedModel(["a", "b"]), memory=memory_of(store)).session("s")

    def two_runs() -> None:
        assert session.execute_sync("one").ok
        assert session.execute_sync("two").ok

    await asyncio.to_thread(two_runs)
    try:
        assert len(await session.history()) == 4
    finally:
        await store.aclose()


async def test_a_nested_agent_with_memory_neither_deadlocks_nor_writes_the_parent_session(
    store: Any,
) -> None:
    memory = memory_of(store)
    child = raygent.agent("child", model=ScriptedModel(["child says hi"]), memory=memory)
    steps = [reply(tool_calls=[call("child", {"input": "ask"}, call_id="c1")]), "parent done"]
    parent = raygent.agent(model=ScriptedModel(steps), tools=[child], memory=memory)
    outcome = await asyncio.wait_for(parent.session("s1").execute("go"), 10)
    assert outcome.ok, outcome.error
    assert outcome.report.tool_calls[0].child is not None
    assert outcome.report.tool_calls[0].child.session_id == "s1"
    assert shapes(await store.load(SCOPE)) == [
        user("go"),
        assistant("", "c1"),
        ("tool", "c1", "child says hi", False),
        assistant("parent done"),
    ]


async def test_a_run_that_cannot_start_is_recorded(store: Any) -> None:
    bot = raygent.agent(
        model=ScriptedModel(["never"]), system_prompt="Hi {{name}}", memory=memory_of(store)
    )
    outcome = await bot.session("s1").execute("go")
    assert outcome.report.status == "failed"
    assert outcome.error is not None and outcome.error.code == "PROMPT"
    assert await store.load(SCOPE) == []
    [record] = await store.errors(SCOPE)
    assert (record.run_id, record.error["code"]) == (outcome.report.run_id, "PROMPT")


async def test_bad_scope_options_fail_the_run_instead_of_raising(store: Any) -> None:
    bot = raygent.agent(model=ScriptedModel(["never"]), memory=memory_of(store))
    outcome = await bot.execute("go", session_id="s1", metadata={"tenant": 7})  # type: ignore[dict-item]
    assert outcome.report.status == "failed"
    assert isinstance(outcome.error, InvalidOptionsError)
    assert await store.list_conversations() == []


# -- runs from other threads (each with its own event loop) ------------------------------


def _session_lock_waiters(sessions: LocalSessions) -> int:
    return sum(len(getattr(lock, "_waiters", None) or ()) for lock in sessions._locks.values())


@pytest.mark.local_only("counts the waiters on the local backend's session locks")
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_runs_from_two_threads_on_one_session_are_serialised(store: Any) -> None:
    """Two threads, each running execute_sync (its own event loop), on one session: the
    second waits for the first, then sees its messages, and neither hangs."""
    sessions = LocalSessions()
    backend = dataclasses.replace(LOCAL, sessions=sessions)
    in_first, release_first = threading.Event(), threading.Event()
    seen: list[int] = []

    def step(messages: list[Message], options: ModelOptions) -> str:
        seen.append(len(messages))
        if messages[-1].text == "one":
            in_first.set()
            release_first.wait(30)
        return f"re {messages[-1].text}"

    bot = raygent.agent(model=FunctionModel(step), memory=memory_of(store), backend=backend)
    session = bot.session("s1")
    results: dict[str, Any] = {}

    def run(text: str) -> None:
        results[text] = session.execute_sync(text)

    first = threading.Thread(target=run, args=("one",), daemon=True)
    first.start()
    assert await asyncio.to_thread(in_first.wait, 30)
    second = threading.Thread(target=run, args=("two",), daemon=True)
    second.start()
    deadline = time.monotonic() + 30
    while _session_lock_waiters(sessions) == 0:  # the second run is queued
        assert time.monotonic() < deadline, "the second run never queued"
        await asyncio.sleep(0.005)
    release_first.set()
    await asyncio.to_thread(first.join, 30)
    await asyncio.to_thread(second.join, 30)
    assert not first.is_alive() and not second.is_alive(), "a run hangs"
    assert results["one"].ok and results["two"].ok, (results["one"].error, results["two"].error)
    assert seen == [1, 3]
    assert len(await session.history()) == 4


# -- two store objects on one file / prefix -------------------------------------------


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_two_store_objects_on_one_store_share_the_session_order(make_store: Any) -> None:
    """Two agents, each with its own client of one SQLite file / Redis prefix, on one
    session: their runs queue behind each other instead of failing on the fencing."""
    probe = Probe()
    bots = [
        raygent.agent(model=FunctionModel(probe), tools=[lookup], memory=memory_of(make_store()))
        for _ in range(2)
    ]
    texts = [f"r{i}" for i in range(4)]
    results = await asyncio.gather(
        *(bots[i % 2].session("s1").execute(text) for i, text in enumerate(texts))
    )
    assert all(r.ok for r in results), [r.error for r in results]
    expected = [shape for text in texts for shape in expected_run(text)]
    assert shapes(await bots[0].session("s1").history()) == expected


async def test_two_agents_on_the_default_file_share_the_session_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    probe = Probe()
    bots = [raygent.agent(name, model=FunctionModel(probe), tools=[lookup]) for name in "ab"]
    sessions = [bot.session("s1") for bot in bots]
    try:
        results = await asyncio.gather(sessions[0].execute("r0"), sessions[1].execute("r1"))
        assert all(r.ok for r in results), [r.error for r in results]
        expected = [*expected_run("r0"), *expected_run("r1")]
        assert shapes(await sessions[1].history()) == expected
    finally:
        for bot in bots:
            assert bot.memory is not None
            await bot.memory.store.aclose()


async def test_a_stream_left_mid_run_is_recorded_as_cancelled(store: Any, policy: str) -> None:
    hanging = Hanging()
    steps = [reply(tool_calls=[call("wait_forever", call_id="c1")])]
    bot = raygent.agent(
        model=ScriptedModel(steps), tools=[hanging.tool], memory=memory_of(store, policy)
    )
    stream = bot.session("s1").stream("go")
    async for event in stream:
        if event.type == "agent.tool.calling":
            await hanging.started.wait()
            break  # the consumer stops listening: the run is cancelled
    outcome = await stream.result
    assert isinstance(outcome.error, AgentCancelledError)
    await hanging.was_cancelled()
    assert shapes(await store.load(SCOPE)) == ([user("go")] if policy == "message" else [])
    [record] = await store.errors(SCOPE)
    assert record.run_id == outcome.report.run_id
    assert shapes(record.messages) == [user("go"), assistant("", "c1")]


async def test_a_queued_run_cancelled_as_the_session_is_handed_to_it_passes_it_on() -> None:
    sessions, memory = LocalSessions(), memory_of(InMemoryStore())
    first = await sessions.acquire(memory, SCOPE, "a")
    second = asyncio.ensure_future(sessions.acquire(memory, SCOPE, "b"))
    third = asyncio.ensure_future(sessions.acquire(memory, SCOPE, "c"))
    deadline = time.monotonic() + 10
    while _session_lock_waiters(sessions) < 2:
        assert time.monotonic() < deadline, "the runs never queued"
        await asyncio.sleep(0)
    await first.release()  # handed to the second run...
    second.cancel()  # ...which is cancelled before it could take it
    with pytest.raises(asyncio.CancelledError):
        await second
    lease = await asyncio.wait_for(third, 10)  # passed on, not lost
    assert lease.history == []
    await lease.release()
    again = await asyncio.wait_for(sessions.acquire(memory, SCOPE, "d"), 10)
    await again.release()


async def test_clear_waits_for_the_run_in_progress_then_the_next_run_starts_afresh(
    store: Any,
) -> None:
    entered, release = asyncio.Event(), asyncio.Event()
    seen: list[int] = []

    async def answer(messages: list[Message], options: ModelOptions) -> Any:
        seen.append(len(messages))
        if len(seen) == 2:  # the second run waits, mid-trip, holding the session
            entered.set()
            await release.wait()
        return reply(f"answer {len(seen)}")

    bot = raygent.agent(model=FunctionModel(answer), memory=memory_of(store, "message"))
    session = bot.session("s1")
    assert (await session.execute("one")).ok
    running = asyncio.ensure_future(session.execute("two"))
    await entered.wait()
    clearing = asyncio.ensure_future(session.clear())
    for _ in range(20):  # let the clear get as far as it can: to the session's turn
        await asyncio.sleep(0)
    assert not clearing.done()
    release.set()
    result = await running
    await clearing
    assert result.ok  # its saves were not refused halfway
    assert await session.history() == []
    third = await session.execute("three")
    assert third.ok and seen[-1] == 1  # only its own question: it started afresh
    assert [m.role for m in await session.history()] == ["user", "assistant"]


async def test_a_session_stores_input_given_as_message_dicts(store: Any, policy: str) -> None:
    model = ScriptedModel(["first", "second"])
    bot = raygent.agent(model=model, memory=memory_of(store, policy))
    session = bot.session("dicts")
    first = await session.execute([{"role": "user", "content": [{"type": "text", "text": "one"}]}])
    bad = await session.execute([{"role": "user", "content": 1}])
    second = await session.execute({"role": "user", "content": "two"})
    assert first.ok and second.ok, (first.error, second.error)
    assert isinstance(bad.error, InvalidOptionsError)
    assert bad.error.message.startswith("input[0]")
    stored = await session.history()
    assert shapes(stored) == [user("one"), assistant("first"), user("two"), assistant("second")]
    assert len(model.requests) == 2  # the bad input never reached the model
    sent, _ = model.requests[1]
    assert shapes(sent) == [user("one"), assistant("first"), user("two")]

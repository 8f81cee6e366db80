"""Two writers on one session never fork its history.

A second "process" is a second `LocalSessions` (its own locks) and a second store
client on the same SQLite file or Redis prefix: nothing in this process orders the two,
so only the store's expected_position fencing keeps the history linear. Then the real
thing: two spawned processes running session runs on one SQLite file / Redis prefix.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import uuid
from pathlib import Path
from typing import Any

import pytest
from memory_support import (
    POLICIES,
    Held,
    Variant,
    assert_linear,
    assert_wellformed,
    assistant,
    delete_prefix,
    echo_step,
    expected_run,
    lookup,
    process_runs,
    result,
    shape,
    shapes,
    user,
)

import raygent
from raygent import Memory
from raygent.memory import LocalSessions
from raygent.seams.local import LOCAL
from raygent.stores import PositionConflictError, Scope
from raygent.testing import FunctionModel, ScriptedModel, call, reply

SCOPE = Scope("s1")
LOOKUP = reply(tool_calls=[call("lookup", {"q": "x"}, call_id="c1")])


@pytest.fixture(params=POLICIES)
def policy(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def other_process() -> Any:
    """A backend with its own session locks: another process, as far as locks go."""
    return dataclasses.replace(LOCAL, sessions=LocalSessions())


def two_clients(kind: str, make_store: Any) -> tuple[Any, Any]:
    """Two clients of one store (InMemoryStore: one object, it lives in one process)."""
    first = make_store()
    return first, (first if kind == "memory" else make_store())


@pytest.mark.local_only("two lock tables in one process; on Ray the hosts serialise (tests/ray)")
async def test_a_stale_writer_is_refused_and_recorded(
    kind: str, make_store: Any, policy: str
) -> None:
    store_a, store_b = two_clients(kind, make_store)
    held = Held(answer=LOOKUP)
    memory_a = Memory(store_a, policy)  # type: ignore[arg-type]
    memory_b = Memory(store_b, policy)  # type: ignore[arg-type]
    slow = raygent.agent(
        model=ScriptedModel([held, "A done"]),
        tools=[lookup],
        memory=memory_a,
        backend=other_process(),
    )
    fast = raygent.agent(model=ScriptedModel(["B done"]), memory=memory_b, backend=other_process())
    # A loads the history and holds in its first trip; B runs whole meanwhile.
    run_a = asyncio.ensure_future(slow.session("s1").execute("from A"))
    await held.arrived.wait()
    run_b = await asyncio.wait_for(fast.session("s1").execute("from B"), 10)
    assert run_b.ok, run_b.error
    held.release.set()
    stale = await run_a
    # A's next append finds the conversation longer than A loaded it: refused, typed.
    assert stale.report.status == "failed"
    assert isinstance(stale.error, PositionConflictError)
    assert stale.error.code == "STORE_POSITION_CONFLICT"
    a_new = [user("from A"), assistant("", "c1"), result("c1", "found x")]
    if policy == "run":
        a_new.append(assistant("A done"))  # run saves once, after the last trip
    [record] = await store_a.errors(SCOPE)
    assert (record.run_id, record.error["code"]) == (stale.report.run_id, "STORE_POSITION_CONFLICT")
    assert shapes(record.messages) == a_new
    # The history is linear: A's input (message policy only) and then B's run.
    b_run = [user("from B"), assistant("B done")]
    expected = [user("from A"), *b_run] if policy == "message" else b_run
    assert shapes(await store_b.load(SCOPE)) == expected
    runs = assert_linear(await store_b.get_conversation(store_b.ref(SCOPE)))
    assert [shape(s.message) for s in runs[run_b.report.run_id]] == b_run
    # The next run on the session starts from that history and succeeds.
    after = raygent.agent(model=ScriptedModel(["after"]), memory=memory_a, backend=other_process())
    assert (await after.session("s1").execute("next")).ok


async def test_many_runs_from_two_processes_at_once_keep_one_line(
    kind: str, make_store: Any, policy: str
) -> None:
    """Two lock tables, four runs each, all started at once. On Ray, two store clients
    whose sessions the same hosts serialise: every run completes."""
    on_ray = raygent.current_backend().name == "ray"
    stores = two_clients(kind, make_store)
    sessions = []
    for store in stores:
        memory = Memory(store, policy)  # type: ignore[arg-type]
        bot = raygent.agent(
            model=FunctionModel(_yielding_echo),
            tools=[lookup],
            memory=memory,
            backend=raygent.current_backend() if on_ray else other_process(),
        )
        sessions.append(bot.session("s1"))
    texts = [(w, f"w{w}r{i}") for i in range(4) for w in range(2)]
    outcomes = await asyncio.gather(*(sessions[w].execute(text) for w, text in texts))
    check_history(
        await stores[0].get_conversation(stores[0].ref(SCOPE)),
        await stores[0].errors(SCOPE),
        [
            (text, o.report.run_id, o.report.status, _code(o))
            for (_, text), o in zip(texts, outcomes, strict=True)
        ],
        policy,
    )
    assert all(o.ok for o in outcomes) if on_ray else any(o.ok for o in outcomes)


async def _yielding_echo(messages: list[Any], options: Any) -> Any:
    for _ in range(2):
        await asyncio.sleep(0)  # a yield, so that the two writers interleave
    return echo_step(messages, options)


def _code(outcome: Any) -> str | None:
    return None if outcome.error is None else str(outcome.error.code)


def check_history(
    stored: list[Any],
    errors: list[Any],
    runs: list[tuple[str, str, str, str | None]],
    policy: str,
) -> None:
    """Linear positions; each run contiguous and a whole-batch prefix of its messages;
    completed runs whole; every other run refused by the fencing, and recorded."""
    by_run = assert_linear(stored)
    assert_wellformed([s.message for s in stored])
    recorded = {e.run_id: e for e in errors}
    # Whole batches only: the prefixes a run of each policy can leave when it fails.
    cuts = {"message": (0, 1, 3), "turn": (0, 3), "run": (0,)}[policy]
    for text, run_id, status, code in runs:
        kept = [shape(s.message) for s in by_run.get(run_id, [])]
        expected = expected_run(text)
        if status == "completed":
            assert kept == expected, text
            assert run_id not in recorded
        else:
            assert (status, code) == ("failed", "STORE_POSITION_CONFLICT"), text
            assert kept in [expected[:cut] for cut in cuts], text
            assert recorded[run_id].error["code"] == "STORE_POSITION_CONFLICT"
    assert set(by_run) <= {run_id for _, run_id, _, _ in runs}
    assert len(errors) == sum(status != "completed" for _, _, status, _ in runs)


@pytest.mark.local_only("spawned processes run the local backend; Ray's drivers: tests/ray")
def test_two_real_processes_on_one_session(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Two spawned processes, each running 8 session runs on one session, on an SQLite
    file (message and turn policies) and on Redis (message policy)."""
    url, prefix = request.getfixturevalue("redis_url"), f"raygent-mp-{uuid.uuid4().hex}"
    variants = [
        Variant("sqlite", str(tmp_path / "message.db"), "", "message"),
        Variant("sqlite", str(tmp_path / "turn.db"), "", "turn"),
        Variant("redis", url, prefix, "message"),
    ]
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    results = context.Queue()
    writers = [
        context.Process(target=process_runs, args=(variants, writer, 8, barrier, results))
        for writer in range(2)
    ]
    for process in writers:
        process.start()
    try:
        by_writer = dict(results.get(timeout=100) for _ in writers)
        for process in writers:
            process.join(timeout=30)
        assert [p.exitcode for p in writers] == [0, 0]
        for index, variant in enumerate(variants):
            runs = [run for writer in (0, 1) for run in by_writer[writer][index]]
            assert len(runs) == 16
            stored, errors = asyncio.run(_read(variant))
            check_history(stored, errors, runs, variant.policy)
            assert any(status == "completed" for _, _, status, _ in runs)
    finally:
        for process in writers:
            if process.is_alive():  # only when the test failed already
                process.kill()
                process.join()
        results.close()
        results.join_thread()
        delete_prefix(url, prefix)


async def _read(variant: Variant) -> tuple[list[Any], list[Any]]:
    store = variant.store()
    try:
        return await store.get_conversation(store.ref(SCOPE)), await store.errors(SCOPE)
    finally:
        await store.aclose()

"""Durable batches: a killed driver's long runs continue from their snapshots, a retry
resumes its item, items awaiting approval end so and a later batch continues them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from durable_support import (
    FINAL,
    HANG,
    batch_items,
    build_agent,
    build_store,
    file_lines,
    sim_config,
    spawn,
    tool_reply,
)
from test_durable_approval import SCRIPT, executions, make_tools, model
from test_durable_crash import kill, store_spec  # noqa: F401 (a fixture)

import raygent
from raygent import Approve, Durable, Retry
from raygent.errors import AwaitingApprovalError
from raygent.sim import Fault, Match, Reply, Rule, serve
from raygent.stores import SQLiteStore

LONG_RUNS = 64


def rows(sink: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in sink.read_text().splitlines()]


@pytest.mark.local_only("a killed driver process, resumed in this process")
async def test_a_killed_driver_resumes_its_long_runs_from_their_snapshots(
    store_spec: dict[str, Any],  # noqa: F811
    tmp_path: Path,
) -> None:
    sink = tmp_path / "out.jsonl"
    count = 2 * LONG_RUNS
    script = [
        Rule(match=Match(after_tool_result=False), reply=tool_reply("step", 1)),
        # The odd items' second trips hang until the driver dies: 64 long runs in flight.
        Rule(match=Match(last_user="odd", after_tool_result=True), reply=HANG, times=LONG_RUNS),
        Rule(match=Match(after_tool_result=True), reply=FINAL),
    ]
    async with serve(script) as sim:
        config = sim_config(
            sim, "openai", store_spec, items=count, concurrency=LONG_RUNS, sink=str(sink)
        )
        driver = spawn(config, tmp_path, child="durable_batch_child.py")
        await file_lines(sink, LONG_RUNS)  # the even items are done
        await sim.wait_until(lambda s: s.in_flight == LONG_RUNS, timeout=60)
        at_kill = sim.stats().requests
        kill(driver)
        agent = build_agent(config)
        store = build_store(store_spec)
        ended: list[Any] = []
        result = await raygent.batch(
            agent,
            batch_items(count),
            concurrency=LONG_RUNS,
            sink=sink,
            resume=True,
            on_item=ended.append,
            durable=Durable(store=store, delete_on_complete=False),
            progress=False,
        )
        requests = sim.stats().requests
    assert result.ok, result.report
    assert at_kill == 2 * count  # every trip 1, every trip 2 (the odd ones hanging)
    settled_trips, in_flight_at_kill = 2 * count, LONG_RUNS
    assert requests <= settled_trips + in_flight_at_kill
    assert requests == at_kill + LONG_RUNS  # only the lost trips were sent again
    written = rows(sink)
    assert sorted(r["key"] for r in written) == sorted(f"k{i}" for i in range(count))
    assert {r["status"] for r in written} == {"completed"}
    assert result.report.skipped == LONG_RUNS and len(ended) == LONG_RUNS
    resumed = [i for i in ended if i.result.report.resumes]
    assert len(resumed) == LONG_RUNS
    assert {i.result.report.resumed_from_trip for i in resumed} == {1}
    assert all(i.result.usage.requests == 2 for i in resumed)


async def test_a_retried_item_resumes_from_its_snapshot(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    items = [f"question {i}" for i in range(6)]
    # Each item's first trip 2 fails (a 503): its retry resumes after trip 1.
    faults = [
        Rule(
            match=Match(last_user=f"^{item}$", after_tool_result=True),
            reply=Reply(fault=Fault(kind="status", status=503)),
            times=1,
        )
        for item in items
    ]
    script = [
        Rule(match=Match(after_tool_result=False), reply=tool_reply("step", 1)),
        *faults,
        Rule(match=Match(after_tool_result=True), reply=FINAL),
    ]
    async with serve(script) as sim:
        spec = {"kind": "sqlite", "path": str(tmp_path / "runs.db")}
        agent = build_agent(sim_config(sim, "openai", spec))
        result = await raygent.batch(
            agent,
            items,
            durable=Durable(store=store),
            retry=Retry(attempts=2, backoff="none", jitter=False),
            progress=False,
        )
        bodies = [r.body for r in sim.requests]
    await store.aclose()
    assert result.ok, result.report
    assert {i.attempts for i in result.items} == {2}
    # Trip 1 of each item was sent once: the retry resumed after it.
    firsts = [b for b in bodies if b is not None and "tool" not in json.dumps(b["messages"])]
    assert len(firsts) == len(items) and len(bodies) == 3 * len(items)
    # Usage counts each trip once, over both attempts.
    assert all(i.usage.requests == 2 for i in result.items)
    assert result.usage.requests == 2 * len(items)


async def test_items_awaiting_approval_end_so_and_a_later_batch_continues_them(
    tmp_path: Path,
) -> None:
    sent, sink = tmp_path / "sent", tmp_path / "out.jsonl"
    store = SQLiteStore(tmp_path / "runs.db")
    items = [{"key": name, "input": f"Message {name}."} for name in ("x", "y", "z")]
    async with serve(SCRIPT) as sim:
        bot = raygent.agent(model=model("openai", sim), tools=make_tools(sent))
        durable = Durable(store=store)
        first = await raygent.batch(bot, items, sink=sink, durable=durable, progress=False)
        statuses = [r["status"] for r in rows(sink)]
        decisions = {
            item.key: {p.call_id: Approve() for p in item.result.pending} for item in first.items
        }
        second = await raygent.batch(
            bot,
            items,
            sink=sink,
            resume=True,
            durable=durable,
            approvals=decisions,
            progress=False,
        )
        requests = sim.stats().requests
    await store.aclose()
    assert [i.status for i in first.items] == ["awaiting_approval"] * 3
    assert first.report.awaiting_approval == 3 and first.report.failed == 0
    assert statuses == ["awaiting_approval"] * 3
    assert isinstance(first.items[0].result.error, AwaitingApprovalError)
    assert second.ok, second.report
    assert sorted(executions(sent)) == sorted(["send ann", "send bob"] * 3)
    assert requests == 6  # one trip before the pause, one after it, per item
    assert sorted(r["key"] for r in rows(sink)) == ["x", "y", "z"]


async def test_durable_needs_an_agent() -> None:
    async def fn(item: int) -> int:
        return item

    with pytest.raises(TypeError, match="durable= needs an agent"):
        await raygent.batch(fn, [1], durable=Durable(store=SQLiteStore(":memory:")))
    with pytest.raises(ValueError, match="approvals= needs durable="):
        await raygent.batch(fn, [1], approvals={1: {}})


async def test_a_new_durable_item_starts_without_a_refused_resume(tmp_path: Path) -> None:
    events = tmp_path / "events"

    def record(event: Any) -> None:  # where the run runs (a Ray runner, or here)
        with events.open("a") as f:
            f.write(event.type + "\n")

    store = SQLiteStore(tmp_path / "runs.db")
    async with serve([Rule(match=Match(), reply=FINAL)]) as sim:
        agent = build_agent(
            sim_config(sim, "openai", {"kind": "sqlite", "path": str(tmp_path / "runs.db")})
        )
        result = await raygent.batch(
            agent,
            ["one", "two"],
            durable=Durable(store=store),
            run_options={"on": {"*": record}},
            progress=False,
        )
    await store.aclose()
    assert result.ok, result.report
    seen = events.read_text().splitlines()
    # Each item ran once, as a new run: no failed "not found" resume came first.
    assert seen.count("agent.starting") == 2 and "agent.errored" not in seen


async def test_durable_runs_with_approvals_go_by_provider_batch(tmp_path: Path) -> None:
    # The same job as above, its trips as lines of provider batches (issue #29).
    sent, sink = tmp_path / "sent", tmp_path / "out.jsonl"
    store = SQLiteStore(tmp_path / "runs.db")
    items = [{"key": name, "input": f"Message {name}."} for name in ("x", "y", "z")]
    lines = raygent.ProviderBatch(gather_seconds=0.1, poll_seconds=0.02)
    async with serve(SCRIPT) as sim:
        bot = raygent.agent(model=model("openai", sim), tools=make_tools(sent))
        durable = Durable(store=store)
        first = await raygent.batch(
            bot, items, sink=sink, durable=durable, provider_batch=lines, progress=False
        )
        decisions = {
            item.key: {p.call_id: Approve() for p in item.result.pending} for item in first.items
        }
        second = await raygent.batch(
            bot,
            items,
            sink=sink,
            resume=True,
            durable=durable,
            approvals=decisions,
            provider_batch=lines,
            progress=False,
        )
        stats = sim.stats()
    await store.aclose()
    assert [i.status for i in first.items] == ["awaiting_approval"] * 3
    assert second.ok, second.report
    assert sorted(executions(sent)) == sorted(["send ann", "send bob"] * 3)
    assert stats.batch_lines == 6 and stats.requests == stats.batch_calls  # none online
    for item in second.items:
        assert {t.via for t in item.result.report.trips} == {"batch"}

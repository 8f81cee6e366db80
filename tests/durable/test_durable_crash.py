"""A durable run survives its process: SIGKILLed mid-trip or mid-tool, it resumes in
another process from its last settled step (SQLite and Redis stores, both wires)."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from durable_support import (
    FINAL,
    HANG,
    MARKS_ENV,
    build_agent,
    build_store,
    entries_written,
    file_lines,
    script,
    sim_config,
    spawn,
    tool_reply,
)

from raygent.errors import RunNotFoundError
from raygent.sim import Reply, serve
from raygent.stores import Scope

PROVIDERS = ["openai", "anthropic"]
# The killed child and its resumer are processes of their own, on the local backend;
# test_durable_ray.py resumes a killed run on Ray.
LOCAL = pytest.mark.local_only("a killed child process, resumed in this process")


@pytest.fixture(params=["sqlite", "redis"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    if request.param == "sqlite":
        yield {"kind": "sqlite", "path": str(tmp_path / "durable.db")}
        return
    url = request.getfixturevalue("redis_url")
    prefix = f"raygent-durable-{uuid.uuid4().hex[:10]}"
    yield {"kind": "redis", "url": url, "prefix": prefix}
    with redis.Redis.from_url(url) as client:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)


def alternates(history: list[Any]) -> bool:
    """user/assistant alternate (tool results answer the assistant's calls)."""
    roles = [m.role for m in history if m.role != "system"]
    for before, after in itertools.pairwise(roles):
        if before == after == "user" or before == after == "assistant":
            return False
    return True


def kill(child: Any) -> None:
    child.kill()
    child.communicate(timeout=30)


@LOCAL
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_run_killed_during_its_third_trip_resumes_from_the_second(
    provider: str, store_spec: dict[str, Any], tmp_path: Path
) -> None:
    run_id, session = f"run-{uuid.uuid4().hex[:8]}", f"s-{uuid.uuid4().hex[:8]}"
    replies = [tool_reply("step", 1), tool_reply("step", 2)]
    async with serve(script(*replies, HANG, FINAL)) as sim:
        config = sim_config(
            sim, provider, store_spec, run_id=run_id, session_id=session, input="Do two steps."
        )
        child = spawn(config, tmp_path)
        await sim.wait_until(lambda s: s.requests >= 3 and s.in_flight >= 1, timeout=60)
        kill(child)
        agent = build_agent(config)
        resumed = await agent.resume(run_id)
        bodies = [r.body for r in sim.requests]
    async with serve(script(*replies, FINAL)) as clean_sim:
        clean_config = sim_config(clean_sim, provider, store_spec)
        clean = await build_agent(clean_config).execute(
            "Do two steps.", session_id=f"clean-{session}"
        )
    assert clean.ok and resumed.ok, (clean.error, resumed.error)
    assert resumed.text == clean.text == "All steps are done."
    # Usage, cost included, as if never interrupted: the lost trip counts once.
    assert resumed.usage == clean.usage and resumed.usage.cost is not None
    assert resumed.usage.requests == 3
    assert resumed.report.resumed_from_trip == 2
    assert [r.from_trip for r in resumed.report.resumes] == [2]
    assert [t.index for t in resumed.report.trips] == [0, 1, 2]
    # Each settled trip reached the provider once; the trip in flight at the kill twice,
    # with the same conversation.
    assert len(bodies) == 4 and bodies[2] == bodies[3]
    assert bodies[0] != bodies[1] != bodies[2]
    # The session holds the run once, in order.
    store = build_store(store_spec)
    history = await store.load(Scope(session))
    assert [m.role for m in history] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert [m.text for m in history if m.role == "user"] == ["Do two steps."]
    assert alternates(history)
    await store.aclose()


@LOCAL
async def test_a_run_killed_inside_a_slow_tool_runs_that_tool_again_once(
    store_spec: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    async with serve(script(tool_reply("step", 1), tool_reply("slow_step", 2), FINAL)) as sim:
        config = sim_config(sim, "openai", store_spec, run_id=run_id, input="Two steps.")
        child = spawn(config, tmp_path)
        started = await file_lines(tmp_path / "starts", 1)
        # Trip 1 settled, and trip 2's reply written: its round has run a while.
        await entries_written(build_store(store_spec), run_id, 2)
        kill(child)
        (tmp_path / "release").write_text("go")
        monkeypatch.setenv(MARKS_ENV, str(tmp_path))
        resumed = await build_agent(config).resume(run_id)
        requests = sim.stats().requests
    assert resumed.ok, resumed.error
    starts = (tmp_path / "starts").read_text().splitlines()
    assert len(started) == 1 and len(starts) == 2  # once killed, once on resume
    assert starts[0].split()[1] != starts[1].split()[1]  # in two processes
    # Neither trip 1 nor trip 2 was sent again: the reply of trip 2 was kept.
    assert requests == 3
    slow = [c for c in resumed.report.tool_calls if c.name == "slow_step"]
    assert [c.output for c in slow] == ["slow step 2 done"]
    assert resumed.report.resumes[0].reran_calls == [slow[0].call_id]
    assert resumed.report.resumes[0].from_trip == 2


@LOCAL
async def test_two_processes_resuming_one_run_one_wins_the_other_conflicts(
    store_spec: dict[str, Any], tmp_path: Path
) -> None:
    run_id, session = f"run-{uuid.uuid4().hex[:8]}", f"s-{uuid.uuid4().hex[:8]}"
    # The resumed trip takes a while, so the two resumes overlap whoever claims first.
    slow_final = Reply(text="All steps are done.", latency_ms=1500)
    async with serve(
        script(tool_reply("step", 1), tool_reply("step", 2), HANG, slow_final, slow_final)
    ) as sim:
        config = sim_config(
            sim, "openai", store_spec, run_id=run_id, session_id=session, input="Do two steps."
        )
        first = spawn(config, tmp_path)
        await sim.wait_until(lambda s: s.requests >= 3 and s.in_flight >= 1, timeout=60)
        kill(first)
        resumers = [
            spawn({**config, "mode": "resume", "name": name, "barrier": str(tmp_path)}, tmp_path)
            for name in ("a", "b")
        ]
        await file_lines(tmp_path / "ready-a", 1)
        await file_lines(tmp_path / "ready-b", 1)
        (tmp_path / "go").write_text("go")
        outputs = [json.loads(p.communicate(timeout=60)[0].splitlines()[-1]) for p in resumers]
    statuses = sorted((o["status"], o["error"]) for o in outputs)
    assert statuses == [("completed", None), ("failed", "RunConflictError")]
    store = build_store(store_spec)
    history = await store.load(Scope(session))
    assert [m.role for m in history] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]  # one answer: the loser wrote nothing
    record = await store.load_run(Scope(run_id))
    assert record is not None and record.outcome is not None
    await store.aclose()


async def test_resuming_an_unknown_run_fails_typed(store_spec: dict[str, Any]) -> None:
    async with serve(script(FINAL)) as sim:
        agent = build_agent(sim_config(sim, "openai", store_spec))
        result = await agent.resume("no-such-run")
    assert result.status == "failed" and isinstance(result.error, RunNotFoundError)

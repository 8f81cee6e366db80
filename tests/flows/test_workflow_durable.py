"""Durable workflows: a run killed during a step resumes in another process from its
last settled step (settled steps and their agent runs are not run again); drift is
refused until forced; a completed run gives its result again; abandon ends a run; a
durable batch's retry continues the item's run."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from durable_flow_support import OPENED, Review, build_workflow, spawn

import raygent
from raygent.errors import DriftError, RaygentError, RunNotFoundError
from raygent.sim import serve
from raygent.stores import InMemoryStore

LOCAL = pytest.mark.local_only("a killed child process, resumed in this process")


@pytest.fixture(autouse=True)
async def close_stores() -> AsyncIterator[None]:
    yield
    while OPENED:
        await OPENED.pop().aclose()


@pytest.fixture(params=["sqlite", "redis"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    if request.param == "sqlite":
        yield {"kind": "sqlite", "path": str(tmp_path / "flows.db")}
        return
    url = request.getfixturevalue("redis_url")
    prefix = f"raygent-flows-{uuid.uuid4().hex[:10]}"
    yield {"kind": "redis", "url": url, "prefix": prefix}
    with redis.Redis.from_url(url) as client:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)


def _config(sim: Any, store: dict[str, Any], marks: Path, **more: Any) -> dict[str, Any]:
    marks.mkdir(exist_ok=True)
    return {"openai_url": sim.openai_base_url, "store": store, "marks": str(marks), **more}


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def _wait_for_lines(path: Path, count: int, timeout: float = 60.0) -> None:
    # Polled off the loop (the simulator serves on it): a condition, not a sleep.
    def wait() -> None:
        import time

        deadline = time.monotonic() + timeout
        while len(_lines(path)) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{path} never reached {count} lines")
            time.sleep(0.02)

    await asyncio.to_thread(wait)


@LOCAL
async def test_a_workflow_killed_mid_step_resumes_from_its_last_settled_step(
    store_spec: dict[str, Any], tmp_path: Path
) -> None:
    run_id = f"wf-{uuid.uuid4().hex[:8]}"
    async with serve() as sim:
        config = _config(sim, store_spec, tmp_path / "marks", run_id=run_id, hang_review=True)
        child = spawn(config)
        try:
            await _wait_for_lines(tmp_path / "marks" / "review", 1)
        finally:
            child.kill()
            child.communicate(timeout=30)
        assert child.returncode != 0
        assert sim.stats().requests == 1  # draft ran in the child, publish never did

        resumed = await build_workflow({**config, "hang_review": False}).resume(run_id)

        assert resumed.ok, resumed.error
        assert sim.stats().requests == 2  # draft is not sent again; publish is new
        assert len(_lines(tmp_path / "marks" / "review")) == 2  # the unsettled step re-ran
        assert [s.name for s in resumed.report.steps] == ["draft", "review", "publish"]
        assert resumed.report.resumed_from_step == "review"
        assert resumed.report.resumes[-1].settled_steps == 1
        assert isinstance(resumed.outputs["review"], Review)
        assert resumed.outputs["review"].verdict.startswith("approved: ")
        assert resumed.data == resumed.outputs["publish"]

        # Usage counts each run once: what an uninterrupted run of the same steps costs.
        fresh_config = _config(sim, store_spec, tmp_path / "fresh", run_id="unused")
        fresh = await build_workflow(fresh_config).execute("Write about tides.")
        assert fresh.ok
        assert resumed.usage.input_tokens == fresh.usage.input_tokens
        assert resumed.usage.output_tokens == fresh.usage.output_tokens
        assert resumed.usage.cost is not None and fresh.usage.cost is not None
        assert resumed.usage.cost.total == pytest.approx(fresh.usage.cost.total)
        assert resumed.usage == resumed.report.total_usage()


async def test_a_completed_run_gives_its_result_again_and_runs_nothing(tmp_path: Path) -> None:
    spec = {"kind": "sqlite", "path": str(tmp_path / "flows.db")}
    async with serve() as sim:
        config = _config(sim, spec, tmp_path / "marks")
        flow = build_workflow(config)
        first = await flow.execute("Write about tides.", run_id="done-1")
        assert first.ok, first.error
        requests = sim.stats().requests

        again = await build_workflow(config).resume("done-1")

        assert again.ok and again.data == first.data
        assert again.report.resumes[-1].already_resolved
        assert sim.stats().requests == requests
        assert len(_lines(tmp_path / "marks" / "review")) == 1


async def test_a_changed_workflow_is_refused_until_forced(tmp_path: Path) -> None:
    spec = {"kind": "sqlite", "path": str(tmp_path / "flows.db")}
    async with serve() as sim:
        config = _config(sim, spec, tmp_path / "marks")
        store = raygent.Durable(store=InMemoryStore(), delete_on_complete=False)
        failing = raygent.workflow(
            name="publisher",
            steps=[
                raygent.step("draft", run=lambda s: "a draft"),
                raygent.step("review", run=_fails_once(tmp_path / "review-fails")),
                raygent.step("publish", run=lambda s: f"published {s.last}"),
            ],
            durable=store,
        )
        failed = await failing.execute("x", run_id="drift-1")
        assert not failed.ok and failed.outputs == {"draft": "a draft"}

        changed = raygent.workflow(
            name="publisher",
            steps=[*failing.steps, raygent.step("notify", run=lambda s: "sent")],
            durable=store,
        )
        refused = await changed.resume("drift-1")
        assert isinstance(refused.error, DriftError)
        assert refused.error.changed == ["steps"]

        # Nothing changed: the original workflow goes on from review.
        resumed = await failing.resume("drift-1")
        assert resumed.ok, resumed.error
        assert resumed.data == "published reviewed a draft"
        assert resumed.report.resumed_from_step == "review"

        forced_store = raygent.Durable(store=InMemoryStore())
        bumped = raygent.workflow(
            name="publisher", steps=failing.steps, durable=forced_store, version="2"
        )
        await raygent.workflow(name="publisher", steps=failing.steps, durable=forced_store).execute(
            "x", run_id="drift-2"
        )
        assert isinstance((await bumped.resume("drift-2")).error, DriftError)
        forced = await bumped.resume("drift-2", force=True)
        assert forced.report.resumes[-1].drift == ["version"]
        assert config  # the simulator config is unused here: function steps only


def _fails_once(flag: Path) -> Any:
    def review(state: raygent.WorkflowState) -> str:
        if not flag.exists():
            flag.write_text("failed")
            raise RuntimeError("the reviewer is away")
        return f"reviewed {state.last}"

    return review


async def test_abandon_ends_a_stored_run_and_an_unknown_run_is_not_found() -> None:
    durable = raygent.Durable(store=InMemoryStore())
    calls: list[str] = []

    def broken(state: raygent.WorkflowState) -> str:
        calls.append("b")
        raise RaygentError("down", retryable=False)

    flow = raygent.workflow(
        name="w",
        steps=[raygent.step("a", run=lambda s: "a"), raygent.step("b", run=broken)],
        durable=durable,
    )
    assert not (await flow.execute("x", run_id="ab-1")).ok
    assert await flow.is_stored("ab-1")
    await flow.abandon("ab-1", reason="given up")
    after = await flow.resume("ab-1")
    assert after.status == "cancelled" and "given up" in str(after.error)
    assert calls == ["b"]

    missing = await flow.resume("never-stored")
    assert isinstance(missing.error, RunNotFoundError)
    assert not await flow.is_stored("never-stored")


async def test_a_durable_batch_retry_continues_the_items_workflow_run() -> None:
    firsts: list[str] = []
    seconds: list[str] = []

    def first(state: raygent.WorkflowState) -> str:
        firsts.append(str(state.input))
        return f"first {state.input}"

    def second(state: raygent.WorkflowState) -> str:
        seconds.append(str(state.input))
        if seconds.count(str(state.input)) == 1:
            raise RaygentError("a flaky dependency", retryable=True)
        return f"second {state.last}"

    flow = raygent.workflow(
        name="two", steps=[raygent.step("one", run=first), raygent.step("two", run=second)]
    )
    result = await raygent.batch(
        flow,
        [f"item {i}" for i in range(6)],
        durable=raygent.Durable(store=InMemoryStore()),
        retry=raygent.Retry(attempts=2, backoff="none"),
        progress=False,
        runners=0,
    )
    assert [item.status for item in result.items] == ["completed"] * 6
    assert sorted(firsts) == sorted(f"item {i}" for i in range(6))  # never run twice
    assert len(seconds) == 12  # each item's flaky step ran twice
    assert result.data == [f"second first item {i}" for i in range(6)]
    assert all(item.attempts == 2 for item in result.items)

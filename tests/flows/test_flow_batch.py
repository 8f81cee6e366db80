"""Flows in `raygent.batch` and `raygent.eval.run`, on both backends: on Ray the flow
(agents, lambdas and all) ships to the batch runners, its reports come back to the
driver's observers, and many flows at once hold the provider at its bound."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import pytest
from integration_support import (
    OWLS,
    Pipeline,
    digest,
    researcher,
    script,
    sim_model,
    writer,
)

import raygent
from raygent import FlowReport, FlowResult
from raygent import eval as ev
from raygent._batch import BatchItem
from raygent.errors import StepFailedError
from raygent.observers.report import RunReport
from raygent.sim import Latency, Simulator, serve
from raygent.usage import Usage

ONE = raygent.Retry(attempts=1)


def _user_texts(sim: Simulator, system: str) -> list[str]:
    """The last user message of every request by agents of this system prompt."""
    texts = []
    for request in sim.requests:
        body = request.body
        if not isinstance(body, dict) or "messages" not in body:
            continue
        messages = body["messages"]
        if messages and messages[0].get("content") == system:
            texts.append(next(m["content"] for m in reversed(messages) if m["role"] == "user"))
    return texts


async def test_a_batch_of_flows_gives_each_item_its_status_usage_and_sink_line(
    tmp_path: Path, backend_kind: str
) -> None:
    sink = tmp_path / "out.jsonl"
    items = [{"key": f"k{i}", "input": f"topic {i}"} for i in range(5)]
    items.insert(2, {"key": "bad", "input": "doomed"})
    async with serve(script()) as sim:
        model = sim_model(sim)
        flow = Pipeline(
            "brief",
            [("research", researcher(model)), ("write", writer(model))],
            # A lambda, run where the flow runs (a Ray runner): it says which process.
            prepare=lambda text: f"{text} pid {os.getpid()}",
        )
        ended: list[BatchItem] = []  # with a sink, the result keeps only the failures
        result = await raygent.batch(
            flow, items, sink=sink, on_item=ended.append, progress=False, retry=ONE
        )
        asked = _user_texts(sim, "research owls")
    assert result.report.succeeded == 5 and result.report.failed == 1
    assert [item.key for item in result.items] == ["bad"]
    done = sorted(ended, key=lambda item: item.index)
    assert [item.key for item in done] == [item["key"] for item in items]
    statuses = [item.status for item in done]
    assert statuses == ["completed"] * 2 + ["failed"] + ["completed"] * 3
    # The flow ran where the backend runs batches: here, or in runner processes.
    pids = {int(m.group(1)) for text in asked if (m := re.search(r"pid (\d+)$", text))}
    assert pids and len(asked) == 6 * 2 - 1  # two trips a researcher; one refused
    assert (pids == {os.getpid()}) == (backend_kind == "local")
    for item in done:
        assert isinstance(item.result, FlowResult) and item.result.report.name == "brief"
        assert item.usage == item.result.usage
        if item.ok:
            assert item.data == item.result.data
            assert item.data.startswith("Simulated reply to: ") and item.usage.requests == 3
            assert [s.status for s in item.result.report.steps] == ["completed", "completed"]
    # A failed flow item is failed with its typed error.
    bad = done[2]
    assert isinstance(bad.error, StepFailedError) and bad.error.code == "FLOW_STEP_FAILED"
    assert bad.error.step == "research" and bad.error.cause["code"] == "PROVIDER_INVALID_REQUEST"
    assert bad.result.outputs == {} and bad.attempts == 1
    assert result.usage == sum((item.usage for item in done), Usage())
    assert result.usage.requests == 5 * 3
    # The sink: a line per item, with its status, data, error and usage.
    rows = {row["key"]: row for row in map(json.loads, sink.read_text().splitlines())}
    assert set(rows) == {item["key"] for item in items}
    assert rows["bad"]["status"] == "failed" and rows["bad"]["error"]["code"] == "FLOW_STEP_FAILED"
    for item in done:
        row = rows[item.key]
        assert row["usage"]["requests"] == item.usage.requests
        if item.ok:
            assert row["status"] == "completed" and row["data"] == row["text"] == item.data


async def test_a_flow_that_cannot_ship_is_refused_on_ray_and_runs_here(
    tmp_path: Path, backend_kind: str
) -> None:
    lock = threading.Lock()  # cannot be pickled
    sink = tmp_path / "out.jsonl"
    async with serve(script()) as sim:
        flow = Pipeline("locked", [("write", writer(sim_model(sim)))], prepare=lambda t: lock and t)
        if backend_kind == "ray":
            with pytest.raises(TypeError, match="cannot be shipped to Ray runners"):
                await raygent.batch(flow, ["a", "b"], sink=sink, progress=False)
            assert not sink.exists() and sim.stats().requests == 0
        here = await raygent.batch(flow, ["a", "b"], runners=0, progress=False)
    assert here.ok and [item.data for item in here.items] == [
        "Simulated reply to: a",
        "Simulated reply to: b",
    ]


async def test_a_batch_s_flows_are_delivered_to_the_driver_s_observers_once() -> None:
    seen: list[RunReport] = []
    async with serve(script()) as sim:
        flow = digest(sim_model(sim))
        with raygent.observers.add(seen.append), raygent.observers.observe_all(True):
            result = await raygent.batch(
                flow, ["owls", "doomed", "bats"], progress=False, retry=ONE
            )
    assert [item.status for item in result.items] == ["completed", "failed", "completed"]
    # One FlowReport per item (the failed one too), none of their runs apart.
    assert all(isinstance(report, FlowReport) for report in seen)
    assert sorted(r.run_id for r in seen) == sorted(i.result.report.run_id for i in result.items)
    assert sorted(r.status for r in seen) == ["completed", "completed", "failed"]
    assert all(len(r.runs()) == 3 for r in seen if r.status == "completed")


async def test_eval_run_scores_a_flow_on_every_case() -> None:
    cases = [
        {"input": "owls", "expected": "Simulated reply to:"},
        {"input": "bats", "expected": "Simulated reply to:"},
        {"input": "doomed", "expected": "Simulated reply to:"},
    ]
    async with serve(script()) as sim:
        flow = digest(sim_model(sim))
        report = await raygent.eval.run(
            flow,
            cases,
            [ev.contains(), ev.predicate(lambda output: OWLS[:20] in output, name="owls")],
            progress=False,
            retry=ONE,
        )
        received = sim.stats().requests
    assert report.name == "digest" and report.total == 3
    assert report.passed_count == 2 and report.errored_count == 1 and not report.passed
    assert report.scorers == {"contains": 2 / 3, "owls": 2 / 3}
    (failed,) = [case for case in report.cases if not case.passed]
    assert failed.input == "doomed" and failed.error is not None
    assert failed.error["code"] == "FLOW_STEP_FAILED"
    assert report.usage == sum((case.usage for case in report.cases), Usage())
    # The passing cases' 5 requests each, and of the doomed one's what was sent: its
    # refused request is not counted, a sibling's cut off by its failure may be.
    assert 2 * 5 <= report.usage.requests <= received


async def test_500_flows_with_a_4_branch_parallel_step_keep_the_provider_at_its_bound(
    backend_kind: str,
) -> None:
    bound, items, branches = 8, 500, 4
    async with serve(latency=Latency(fixed_ms=5)) as sim:
        model = sim_model(sim, max_concurrency=bound)
        fan = {f"b{n}": writer(model, f"writer-{n}") for n in range(branches)}
        flow = raygent.workflow(
            name="fan",
            steps=[
                # Where each item ran: a lambda, shipped to the Ray runners with the flow.
                raygent.step("where", run=lambda state: f"{state.input} pid {os.getpid()}"),
                raygent.step("fan", parallel=fan),
            ],
        )
        # On Ray, two runner processes share the batch (and the provider's bound).
        result = await raygent.batch(
            flow,
            [f"q{i}" for i in range(items)],
            concurrency=32,
            runners=2,
            progress=False,
            retry=ONE,
        )
        stats = sim.stats()
        asked = _user_texts(sim, "write it up")
    assert result.ok, result.report.errors
    assert result.report.succeeded == items
    assert all(set(item.data) == set(fan) for item in result.items)
    assert stats.requests == items * branches and stats.by_status == {200: items * branches}
    assert result.usage.requests == items * branches
    pids = {int(m.group(1)) for text in asked if (m := re.search(r"pid (\d+)$", text))}
    assert len(asked) >= 500  # the simulator keeps the last requests
    assert pids == ({os.getpid()} if backend_kind == "local" else pids - {os.getpid()})
    assert len(pids) == (1 if backend_kind == "local" else 2)  # on Ray: both runners
    print(f"\npeak in flight {stats.peak_in_flight} (bound {bound}), {stats.requests} requests")
    assert stats.peak_in_flight == bound  # reached, never passed


async def test_a_batch_of_supervisors_fans_out_every_item() -> None:
    async with serve(script()) as sim:
        model = sim_model(sim)
        desk = raygent.supervisor(
            name="desk",
            intents={"research": researcher(model), "write": writer(model)},
            # Both at once on the first iteration, then done (a lambda: it ships to Ray).
            route=lambda s: ["research", "write"] if not s.history else raygent.END,
        )
        result = await raygent.batch(
            desk, [f"topic {i}" for i in range(12)], progress=False, retry=ONE
        )
    assert result.ok, result.report.errors
    assert result.report.succeeded == 12
    for item in result.items:
        assert isinstance(item.result, FlowResult) and item.result.report.kind == "supervisor"
        assert set(item.data) == {"research", "write"}
        assert item.usage.requests == 3  # the researcher's two trips, the writer's one
    assert result.usage.requests == 36

"""Issue #36, point 5: every guarantee in every combination of {online, provider batch}
x {no cache, cache} x {no budget, a binding budget} x {no session, `message`, `turn`
sessions} x {single model, fallback} x {local backend, Ray}.

Each cell runs a small job (8 items, two sessions of two items when there are sessions,
an agent with a tool: two trips an item) into a sink; with a cache it runs the same job
again, as a user would. In every job: every item once in the sink; the report's cost is
the sum of its trips' (per item and per job); a budget's spend stays within the budget
and what is still reserved; each session's history alternates user and assistant. The
second job sends nothing the first one had answered. A fallback's first model is down
(the simulator answers it 503), so every trip fails over.

No combination is refused today (nothing in the code says one cannot be supported), so
every cell runs; a cell that became unsupported would have to fail before anything is
sent, with an error naming the combination.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from combo_support import (
    BUDGET_USD,
    CELLS,
    DOWN,
    SESSIONS,
    Cell,
    Sent,
    Setup,
    items,
    job_budget,
    setup,
    sunk_keys,
    turns,
)

import raygent
from raygent import Usage
from raygent._batch import BatchItem, BatchResult
from raygent.observers.report import TripReport
from raygent.sim import SimStats, Simulator
from raygent.stores import Scope


@dataclass
class Job:
    """One job of a cell: its result, every item as it ended, what was sent."""

    result: BatchResult
    items: list[BatchItem]
    stats: SimStats
    sent: dict[str, list[str]]


@pytest.mark.parametrize("cell", CELLS, ids=lambda cell: cell.id)
async def test_every_guarantee_holds_in_the_combination(
    cell: Cell, backend_kind: str, sim: Simulator, tmp_path: Path
) -> None:
    ready = setup(cell, sim, tmp_path)
    try:
        await _run_cell(cell, ready, Sent(sim), tmp_path)
    finally:
        await ready.close()


async def _run_cell(cell: Cell, ready: Setup, sent: Sent, folder: Path) -> None:
    first = await _job(cell, ready, sent, folder / "first.jsonl")
    _check_job(cell, first, folder / "first.jsonl", first_job=True)
    await _check_sessions(cell, ready, [first])
    if not cell.cache:
        return
    second = await _job(cell, ready, sent, folder / "second.jsonl")
    _check_job(cell, second, folder / "second.jsonl", first_job=False)
    await _check_sessions(cell, ready, [first, second])
    # Nothing the first job had answered is sent again (a fallback's first model, down,
    # answered nothing: asking it again is no waste).
    had = set(first.sent.get(cell.up, []))
    again = [body for body in second.sent.get(cell.up, []) if body in had]
    assert not again, f"{len(again)} requests the first job had answered were sent again"
    if cell.session is None and not cell.budget:
        # Every request of the second job is one the first answered: none goes out.
        assert second.sent.get(cell.up, []) == [], second.stats


async def _job(cell: Cell, ready: Setup, sent: Sent, sink: Path) -> Job:
    ended: list[BatchItem] = []
    await sent.start()
    result = await raygent.batch(
        ready.agent,
        items(cell),
        sink=sink,
        on_item=ended.append,
        **ready.options,
        **job_budget(cell),
    )
    stats = sent.sim.stats()  # before reading the batch files adds calls
    return Job(result, ended, stats, await sent.bodies())


def _check_job(cell: Cell, job: Job, sink: Path, *, first_job: bool) -> None:
    keys = [row["key"] for row in items(cell)]
    report = job.result.report
    # Every item exactly once, in the sink and to on_item.
    assert sorted(sunk_keys(sink)) == sorted(keys)
    assert sorted(item.key for item in job.items) == sorted(keys)
    assert report.total == len(keys)
    assert all(item.attempts <= 1 for item in job.items), report
    paid = _check_costs(cell, job)
    if cell.budget:
        _check_budget(job, paid, first_job=first_job)
    else:
        assert report.succeeded == len(keys), report.errors
    if first_job:
        _check_routes(cell, job)


def _check_costs(cell: Cell, job: Job) -> float:
    """The report's cost is the sum of its trips': per item, per job, by batch, and
    what the cache saved. Returns the job's cost."""
    total = 0.0
    for item in job.items:
        paid = sum(_cost(trip.usage) for trip in _trips(item))
        assert _cost(item.usage) == pytest.approx(paid, abs=1e-9), item.key
        total += paid
    assert _cost(job.result.usage) == pytest.approx(total, abs=1e-9)
    hits = [t for i in job.items for t in _trips(i) if t.cache == "hit"]
    assert job.result.report.cache_hits == len(hits)
    assert job.result.report.saved == pytest.approx(sum(t.saved for t in hits), abs=1e-9)
    if cell.mode == "batch":
        summary = job.result.report.provider_batch
        assert summary is not None
        by_batch = sum(_cost(t.usage) for i in job.items for t in _trips(i) if t.via == "batch")
        # (None when nothing went by batch: every trip came from the cache)
        assert (summary.cost or 0.0) == pytest.approx(by_batch, abs=1e-9)
    return total


def _check_budget(job: Job, paid: float, *, first_job: bool) -> None:
    """The spend stays within the budget and what is still reserved; the items it
    stopped end BUDGET_EXCEEDED; in a first job it binds."""
    shown = job.result.report.budget
    assert shown is not None and shown.limit.usd == BUDGET_USD
    assert shown.spent.usd == pytest.approx(paid, abs=1e-6)
    assert paid <= BUDGET_USD + shown.reserved.usd + 1e-9, (
        f"spent {paid:.4f} USD of a {BUDGET_USD} USD budget",
        shown,
    )
    stopped = [i for i in job.items if not i.ok]
    assert all(i.error is not None and i.error.code == "BUDGET_EXCEEDED" for i in stopped), (
        job.result.report.errors
    )
    if first_job:  # the job costs about twice the budget
        assert stopped, f"a budget of {BUDGET_USD} USD stopped nothing: {shown}"


def _check_routes(cell: Cell, job: Job) -> None:
    """Every trip sent went the cell's way: by batch (nothing online) or online; with a
    fallback, each failed over from the first model (down) to the second."""
    sent = [t for i in job.items for t in _trips(i) if t.usage.requests > 0]
    by_batch = cell.mode == "batch" and cell.provider != "bedrock"
    assert {t.via for t in sent} <= {"batch" if by_batch else "online"}
    if by_batch:
        assert job.stats.requests == job.stats.batch_calls, job.stats  # nothing online
    elif cell.mode == "batch":  # Bedrock: 8 items, under a job's 100 records: online, noted
        summary = job.result.report.provider_batch
        assert summary is not None and summary.notes and job.stats.batch_calls == 0
    if cell.fallback:
        assert all([a["model"] for a in t.attempts] == [DOWN] for t in sent), sent


def _trips(item: BatchItem) -> list[TripReport]:
    return list(item.result.report.trips) if item.result is not None else []


def _cost(usage: Usage) -> float:
    return 0.0 if usage.cost is None else usage.cost.total


async def _check_sessions(cell: Cell, ready: Setup, jobs: list[Job]) -> None:
    """Each session's history alternates user and assistant (a turn's tool calls and
    results folded into its reply), its items in input order, job after job, each once;
    but for what a failed run leaves by its save policy: under `message` its question
    (and its whole tool turns), under `turn` its whole turns only."""
    if cell.session is None:
        return
    assert ready.sessions is not None
    rows = items(cell)
    for session in SESSIONS:
        expected_shape, expected_asked = "", []
        for job in jobs:
            ended = {item.key: item for item in job.items}
            for row in rows:
                if row.get("session_id") == session:
                    stored = _left_by(ended[row["key"]], cell.session)
                    expected_shape += stored
                    expected_asked += [row["input"]] if stored else []
        history = await ready.sessions.load(Scope(session))
        assert turns(history) == expected_shape, (session, history)
        assert [m.text for m in history if m.role == "user"] == expected_asked


def _left_by(item: BatchItem, policy: str) -> str:
    """The turns an item's run leaves in its session ("u", "ua" or nothing)."""
    if item.ok:
        return "ua"
    if item.error is not None and item.error.details.get("started") is False:
        return ""  # the job's budget had run out: the item did not run
    answered = [t for t in item.result.report.trips if t.finish_reason is not None]
    if policy == "message":
        return "ua" if answered else "u"
    return "ua" if answered else ""

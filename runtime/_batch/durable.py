"""Durable batch items: each item's run has an id made from its key, so that a retry,
a runner that died, or a driver resumed from its sink (`resume=True`) continues the
item's run from its last settled step instead of from scratch; a new job on the same sink
runs its items anew.

An attempt resumes the item's run when it is stored (a completed one gives its result
again, one awaiting approval takes the item's decisions from `approvals`), and starts
it under that id otherwise.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..abort import AbortSignal
from ..usage import Usage

__all__ = [
    "DurableItems",
    "ItemRuns",
    "attempt_usage",
    "durable_items",
    "item_runs",
]


def _namespace(job: str | None) -> str:
    """A batch's name for its items' runs: its sink's job (a resumed batch finds its runs
    again; a new job on the same sink names new ones, see `sink_job`), else new."""
    return job if job is not None else uuid.uuid4().hex[:12]


def _run_id(namespace: str, key: Any) -> str:
    # repr tells 1 from "1"; a key is a str, an int or a field value read back alike.
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:24]
    return f"batch-{namespace}-{digest}"


@dataclass(frozen=True)
class ItemRuns:
    """How a batch names the runs of its items on sessions, and whether an attempt may
    find its run's messages stored already: an item's attempts are one run on its
    session, whichever process died and whenever (a retry after its runner died, or a
    resumed batch, goes on after what the run stored, or returns its stored answer)."""

    namespace: str
    resumed: bool = False

    def run_id(self, key: Any) -> str:
        return _run_id(self.namespace, key)

    def recovers(self, attempts: int) -> bool:
        """Whether an attempt (the `attempts`-th) looks in its session for its run."""
        return attempts > 1 or self.resumed


def item_runs(job: str | None, resume: bool) -> ItemRuns:
    """`job`: the namespace of the sink's job (`SinkJob.namespace`), None without a sink."""
    return ItemRuns(_namespace(job), resumed=resume)


@dataclass(frozen=True)
class DurableItems:
    """How a batch names its items' runs, and the decisions for those awaiting approval
    (item key -> {call_id: Approve() | Deny(reason)})."""

    namespace: str
    approvals: Mapping[Any, Mapping[str, Any]] | None = None

    def run_id(self, key: Any) -> str:
        return _run_id(self.namespace, key)

    async def attempt(
        self, executable: Any, key: Any, input: Any, options: dict[str, Any], signal: AbortSignal
    ) -> Any:
        run_id = self.run_id(key)
        if not await executable.is_stored(run_id, **options):
            # A new item (or one whose run never got as far as its header): no resume
            # attempt, so no refused run reaches the observers.
            return await executable.execute(input, **options, run_id=run_id, signal=signal)
        decisions = (self.approvals or {}).get(key)
        return await executable.resume(run_id, approvals=decisions, **options, signal=signal)


def durable_items(
    job: str | None, approvals: Mapping[Any, Mapping[str, Any]] | None
) -> DurableItems:
    """The batch's naming: by its sink's job (a resumed batch finds its runs again), else
    new."""
    return DurableItems(_namespace(job), approvals)


def attempt_usage(result: Any) -> Usage:
    """What this attempt added: a resumed run's usage includes its earlier attempts'
    (which the batch counted already), so only the trips from the resume on count."""
    report: Any = getattr(result, "report", None)
    resumes = getattr(report, "resumes", None)
    if not resumes:
        return result.usage if isinstance(getattr(result, "usage", None), Usage) else Usage()
    last = resumes[-1]
    if last.already_resolved:
        return Usage()
    steps = getattr(report, "steps", None)
    if steps is not None:  # a workflow: the runs of the steps from the resume on
        runs = (run.report for step in steps[last.settled_steps :] for run in step.runs)
        return sum((r.total_usage() for r in runs), Usage())
    start = last.from_trip
    own = sum((t.usage for t in report.trips if t.index >= start), Usage())
    children = (
        c.child.total_usage() for c in report.tool_calls if c.child and c.trip_index >= start
    )
    return own + sum(children, Usage())

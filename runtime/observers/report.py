"""What a run returns: the result, and a report of everything it did."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..compaction.policy import CompactionRecord
from ..errors import RaygentError
from ..messages import Message, ProviderBlock
from ..usage import Usage
from ._records import PendingCall, ResumeRecord
from ._summary import report_repr, result_repr, tool_call_repr, trip_repr
from .views import ROWS, STYLE, badge, bar, clip, esc, more, secs, table, usage_line

__all__ = [
    "AgentReport",
    "AgentResult",
    "FlowReport",
    "FlowResult",
    "FlowResume",
    "ModelInfo",
    "PendingCall",
    "ResumeRecord",
    "RunReport",
    "RunStatus",
    "RunTrail",
    "StepReport",
    "StepRun",
    "ToolCallReport",
    "TripReport",
]

RunStatus = Literal["completed", "failed", "cancelled", "incomplete", "awaiting_approval"]


class Timing(BaseModel):
    model_config = ConfigDict(extra="forbid")
    started_at: datetime
    ended_at: datetime | None = None
    duration: float | None = None


class ModelInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    provider: str


class ToolCallReport(BaseModel):
    """One tool call: what the model asked, what came back, how long it took."""

    model_config = ConfigDict(extra="forbid")
    call_id: str
    name: str
    input: dict[str, Any] | None
    # The text the model read (a result's image parts are not in it: `images` counts them).
    output: str | None = None
    # Structured data the tool gave beside its text (`ToolResult.data`, an MCP server's
    # structured content), as JSON, for the program. Both left out of the JSON when unset.
    data: Any = Field(default=None, exclude_if=lambda value: value is None)
    images: int = Field(default=0, exclude_if=lambda value: value == 0)
    error: dict[str, Any] | None = None
    trip_index: int
    timing: Timing
    session_id: str | None = None
    # The nested run's report when the tool is an executable (an agent, a workflow, a
    # supervisor).
    child: RunReport | None = None

    def __repr__(self) -> str:
        return tool_call_repr(self)


class TripReport(BaseModel):
    """One model request and its reply."""

    model_config = ConfigDict(extra="forbid")
    index: int
    purpose: Literal["answer", "tools", "repair", "continuation", "resume"] = "answer"
    finish_reason: str | None = None
    output: str = ""
    usage: Usage = Field(default_factory=Usage)
    timing: Timing
    tool_calls: list[str] = Field(default_factory=list)
    truncated_tool_calls: list[str] = Field(default_factory=list)
    attempts: list[dict[str, Any]] = Field(default_factory=list)
    session_id: str | None = None
    # "batch": sent as a line of a provider batch (`provider_batch=`), which took
    # `batch_wait` seconds from the line's sending to its answer.
    via: Literal["online", "batch"] = "online"
    provider_batch: str | None = None
    batch_wait: float | None = None
    # With a response cache: "hit" (no request sent; `usage` counts the reply's tokens at
    # no cost), "miss", or "unavailable" (its store failed: sent as a miss); None without a
    # cache. `saved`: what a hit cost when paid (USD; 0: unknown). `service_tier`: the tier
    # the provider says it served (what `usage` is priced at). `rate_wait`: seconds its
    # requests waited for a rate limit; `throttled`: the 429s they met. Unset: not in JSON.
    cache: Literal["hit", "miss", "unavailable"] | None = Field(None, exclude_if=lambda v: not v)
    saved: float = Field(default=0.0, exclude_if=lambda v: v == 0.0)
    service_tier: str | None = Field(default=None, exclude_if=lambda v: v is None)
    rate_wait: float = Field(default=0.0, exclude_if=lambda v: v == 0.0)
    throttled: int = Field(default=0, exclude_if=lambda v: v == 0)
    # The model the provider says answered, and the provider that answered when it is
    # not the run's model's (a fallback's later model). Unset: not in JSON.
    response_model: str | None = Field(default=None, exclude_if=lambda v: v is None)
    response_provider: str | None = Field(default=None, exclude_if=lambda v: v is None)

    def __repr__(self) -> str:
        return trip_repr(self)


class AgentReport(BaseModel):
    """Everything one run did (`session_id` on every node, nested runs included)."""

    model_config = ConfigDict(extra="forbid")
    run_id: str
    root_run_id: str
    parent_run_id: str | None = None
    session_id: str | None = None
    tenant: str | None = None  # the name of the `raygent.Tenant` it ran for
    name: str
    version: str | None = None
    status: RunStatus = "completed"
    started_at: datetime
    ended_at: datetime | None = None
    duration: float | None = None
    model: ModelInfo
    trips: list[TripReport] = Field(default_factory=list)
    tool_calls: list[ToolCallReport] = Field(default_factory=list)
    system_prompt: str | None = None
    messages: list[Message] | None = None
    error: dict[str, Any] | None = None
    handler_errors: list[dict[str, Any]] = Field(default_factory=list)
    compactions: list[CompactionRecord] = Field(default_factory=list)
    # Durable runs: every resume, and the trip the first one picked up at.
    resumes: list[ResumeRecord] = Field(default_factory=list)
    resumed_from_trip: int | None = None
    pending: list[PendingCall] = Field(default_factory=list)

    def total_usage(self) -> Usage:
        """The usage of every trip, nested runs' included (what `result.usage` adds up)."""
        own = sum((trip.usage for trip in self.trips), Usage())
        return own + sum((c.child.total_usage() for c in self.tool_calls if c.child), Usage())

    @property
    def saved(self) -> float:
        """What the response cache saved this run, nested runs included (USD): the cost,
        when it was paid, of every reply served from the cache."""
        own = sum(trip.saved for trip in self.trips)
        return own + sum(c.child.saved for c in self.tool_calls if c.child)

    @property
    def cache_hits(self) -> int:
        """Trips served from the response cache, nested runs' included."""
        own = sum(1 for trip in self.trips if trip.cache == "hit")
        return own + sum(c.child.cache_hits for c in self.tool_calls if c.child)

    @property
    def cache_errors(self) -> int:
        """Trips whose response cache could not reach its store (sent as misses), nested too."""
        own = sum(1 for trip in self.trips if trip.cache == "unavailable")
        return own + sum(c.child.cache_errors for c in self.tool_calls if c.child)

    @property
    def tier_fallbacks(self) -> int:
        """Requests sent again at their `Tier`'s fallback (refused for capacity), nested too."""
        own = sum(1 for trip in self.trips for a in trip.attempts if "fallback" in a)
        return own + sum(c.child.tier_fallbacks for c in self.tool_calls if c.child)

    @property
    def tool_errors(self) -> int:
        """Tool calls that failed (the model read an error, not a result), nested too."""
        own = sum(1 for call in self.tool_calls if call.error is not None)
        return own + sum(c.child.tool_errors for c in self.tool_calls if c.child)

    def __repr__(self) -> str:
        return report_repr(self)

    def to_json(self, indent: int | None = None) -> str:
        """The whole tree as JSON, nested runs included; `from_json` reads it back."""
        return self.model_dump_json(indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> AgentReport:
        return cls.model_validate_json(text)

    def _repr_html_(self) -> str:
        return report_html(self)


StepStatus = Literal["completed", "failed", "skipped", "cancelled"]


class StepRun(BaseModel):
    """One run a step made: which branch (a parallel step's branch, a supervisor's
    intent) and which attempt, and the run's own report."""

    model_config = ConfigDict(extra="forbid")
    branch: str | None = None
    attempt: int = 1
    report: RunReport


class StepReport(BaseModel):
    """One step of a workflow, or one routing or intent of a supervisor's iteration."""

    model_config = ConfigDict(extra="forbid")
    name: str
    kind: Literal["run", "agent", "parallel", "route", "intent"]
    status: StepStatus = "completed"
    iteration: int | None = None
    attempts: int = 0
    started_at: datetime
    ended_at: datetime | None = None
    duration: float | None = None
    error: dict[str, Any] | None = None
    runs: list[StepRun] = Field(default_factory=list)


class FlowResume(BaseModel):
    """One resume of a durable workflow: the steps it found settled (not run again) and
    the step it went on from."""

    model_config = ConfigDict(extra="forbid")
    at: datetime
    settled_steps: int
    from_step: str | None = None
    forced: bool = False
    drift: list[str] = Field(default_factory=list)
    already_resolved: bool = False


class FlowReport(BaseModel):
    """Everything one workflow or supervisor run did: its steps, and under them the runs
    they made (agents, nested workflows), every attempt kept."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["workflow", "supervisor"]
    run_id: str
    root_run_id: str
    parent_run_id: str | None = None
    session_id: str | None = None
    name: str
    version: str | None = None
    status: RunStatus = "completed"
    started_at: datetime
    ended_at: datetime | None = None
    duration: float | None = None
    steps: list[StepReport] = Field(default_factory=list)
    error: dict[str, Any] | None = None
    handler_errors: list[dict[str, Any]] = Field(default_factory=list)
    # Durable workflows: every resume, and the step the first one went on from.
    resumes: list[FlowResume] = Field(default_factory=list)
    resumed_from_step: str | None = None

    def runs(self) -> list[RunReport]:
        """The runs this one made, in order (retries included), not their own children."""
        return [run.report for step in self.steps for run in step.runs]

    def step(self, name: str) -> StepReport | None:
        """The last report of the step (or intent) called `name`, if it ran."""
        return next((s for s in reversed(self.steps) if s.name == name), None)

    def total_usage(self) -> Usage:
        """The usage of every run under this one, every attempt counted."""
        return sum((run.total_usage() for run in self.runs()), Usage())

    @property
    def saved(self) -> float:
        """What the response cache saved the runs under this one (USD)."""
        return sum(run.saved for run in self.runs())

    @property
    def cache_hits(self) -> int:
        """Trips of the runs under this one served from the response cache."""
        return sum(run.cache_hits for run in self.runs())

    @property
    def cache_errors(self) -> int:
        """Trips whose response cache could not reach its store, in every run."""
        return sum(run.cache_errors for run in self.runs())

    @property
    def tier_fallbacks(self) -> int:
        """Requests of every run sent again at their `Tier`'s fallback."""
        return sum(run.tier_fallbacks for run in self.runs())

    @property
    def tool_errors(self) -> int:
        """Tool calls of the runs under this one that failed."""
        return sum(run.tool_errors for run in self.runs())

    def __repr__(self) -> str:
        return report_repr(self)

    def to_json(self, indent: int | None = None) -> str:
        return self.model_dump_json(indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> FlowReport:
        return cls.model_validate_json(text)

    def _repr_html_(self) -> str:
        return report_html(self)


# A run's report, whatever ran: what observers receive and tool calls hang their nested
# runs by.
RunReport = AgentReport | FlowReport
StepRun.model_rebuild()
ToolCallReport.model_rebuild()
AgentReport.model_rebuild()


@dataclass(frozen=True)
class RunTrail:
    """What an unfinished run on a session handed its save policy: its new messages in
    order and the appends it numbered. A retry of the run continues from it (see
    `raygent.agents._retry_resume`)."""

    messages: tuple[Message, ...]
    turns: int


@dataclass
class AgentResult:
    """The outcome of one run. `execute()` never raises: failures are in `error`.

    `data` is the validated structured output (a model instance) when an output type was
    given, else None. `blocks` (provider blocks such as thinking): single-trip runs only.
    """

    data: Any
    text: str
    blocks: list[ProviderBlock] | None
    report: AgentReport
    usage: Usage
    error: RaygentError | None = None
    # Set on a run on a session that did not complete: what its retry continues from.
    trail: RunTrail | None = field(default=None, repr=False, compare=False)

    @property
    def status(self) -> RunStatus:
        return self.report.status

    @property
    def ok(self) -> bool:
        return self.report.status == "completed"

    @property
    def run_id(self) -> str:
        return self.report.run_id

    @property
    def pending(self) -> list[PendingCall]:
        """The tool calls awaiting approval (status `awaiting_approval`), else empty."""
        return self.report.pending

    def _repr_html_(self) -> str:
        return report_html(self.report, result=self)

    def __repr__(self) -> str:
        return result_repr("AgentResult", self)


@dataclass
class FlowResult:
    """The outcome of a workflow or supervisor run. `execute()` never raises: failures
    are in `error`, and what the steps produced before is kept in `outputs`.

    `data` is the validated output model when the flow declares one, else the last step's
    output (a workflow) or the last iteration's (a supervisor; by intent name when it ran
    several). `usage` is every run's under it, every attempt counted.
    """

    data: Any
    text: str
    report: FlowReport
    usage: Usage
    error: RaygentError | None = None
    outputs: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> RunStatus:
        return self.report.status

    @property
    def ok(self) -> bool:
        return self.report.status == "completed"

    @property
    def run_id(self) -> str:
        return self.report.run_id

    def _repr_html_(self) -> str:
        return report_html(self.report, result=self)

    def __repr__(self) -> str:
        return result_repr("FlowResult", self)


# -- notebook views (`_repr_html_`) ------------------------------------------------------


def report_html(report: RunReport, result: AgentResult | FlowResult | None = None) -> str:
    """A run: status, usage and cost, its answer or error, and a timeline of its trips
    and tool calls (nested runs folded under their tool call)."""
    if isinstance(report, FlowReport):
        return flow_html(report, result)
    assert result is None or isinstance(result, AgentResult)
    text = result.text if result is not None else (report.trips[-1].output if report.trips else "")
    usage = result.usage if result is not None else report.total_usage()
    return f'<div class="rg">{STYLE}{_run_body(report, usage, text)}</div>'


def flow_html(report: FlowReport, result: AgentResult | FlowResult | None = None) -> str:
    """A workflow or supervisor run: status, usage and cost, its answer or error, and its
    steps (kind, status, attempts, duration, a bar on the run's span), each step's runs
    folded under it (nested flows the same way)."""
    usage = result.usage if result is not None else report.total_usage()
    answer: Any = None
    if isinstance(result, FlowResult):
        answer = result.text or result.data
    return f'<div class="rg">{STYLE}{_flow_body(report, usage, answer)}</div>'


# -- one run -----------------------------------------------------------------------------


def _run_body(report: AgentReport, usage: Usage, text: str) -> str:
    parts = [
        f"<div><b>{esc(report.name)}</b> {badge(report.status, report.status)} "
        f'<span class="meta">{esc(report.model.provider)}:{esc(report.model.name)} · '
        f"{secs(report.duration)} · {len(report.trips)} trips · "
        f"{len(report.tool_calls)} tool calls · run {esc(report.run_id)}"
        + (f" · session {esc(report.session_id)}" if report.session_id else "")
        + "</span></div>",
        f"<div>{usage_line(usage)}</div>",
    ]
    if report.error:
        parts.append(_error(report.error))
    if text:
        parts.append(f'<div class="out">{esc(clip(text, 2000))}</div>')
    if report.pending:
        calls = "".join(
            f"<tr><td>{esc(p.call_id)}</td><td>{esc(p.tool)}</td>"
            f"<td>{esc(clip(p.arguments))}</td></tr>"
            for p in report.pending
        )
        parts.append(
            "<div><b>awaiting approval</b></div>"
            f"<table><tr><th>call</th><th>tool</th><th>arguments</th></tr>{calls}</table>"
        )
    if report.resumes:
        resumed = "; ".join(
            f"from trip {r.from_trip}"
            + (f", re-ran {', '.join(r.reran_calls)}" if r.reran_calls else "")
            + (" (forced)" if r.forced else "")
            + (" (already resolved)" if r.already_resolved else "")
            for r in report.resumes
        )
        parts.append(f'<div class="meta">resumed: {esc(resumed)}</div>')
    parts.append(_timeline(report))
    return "".join(parts)


def _timeline(report: AgentReport) -> str:
    """One row per trip and tool call, in start order, each a bar on the run's span."""
    start = report.started_at
    timings = [t.timing for t in report.trips] + [c.timing for c in report.tool_calls]
    ends = [timing.ended_at for timing in timings if timing.ended_at]
    end = max([report.ended_at or start, *ends])
    span = max((end - start).total_seconds(), 1e-9)

    def place(timing: Timing) -> tuple[float, float]:
        left = (timing.started_at - start).total_seconds() / span
        stop = (timing.ended_at or end) - start
        return left, max(stop.total_seconds() / span - left, 0.0)

    rows: list[tuple[datetime, str]] = []
    for trip in report.trips:
        left, width = place(trip.timing)
        label = (
            f"trip {trip.index} · {esc(trip.purpose)}"
            f' <span class="meta">{esc(trip.finish_reason or "")} · '
            f"{trip.usage.total_tokens} tokens{_tier(trip.service_tier)}</span>"
        )
        cells = f"<td>{label}</td><td>{bar(left, width, 'trip')}</td>"
        rows.append((trip.timing.started_at, _row(cells, trip.timing)))
    for call in report.tool_calls:
        left, width = place(call.timing)
        kind = "bad" if call.error else "tool"
        arguments = clip(call.input, 120)
        label = f"{esc(call.name)}(<span class='meta'>{esc(arguments)}</span>)"
        if call.error:
            detail = f'<div class="err">{esc(clip(call.error.get("message")))}</div>'
        else:
            detail = f'<div class="meta">→ {esc(clip(call.output))}</div>'
        if call.child is not None:
            detail += _folded(call.child, f"nested {_kind(call.child)}")
        cells = f"<td>{label}{detail}</td><td>{bar(left, width, kind)}</td>"
        rows.append((call.timing.started_at, _row(cells, call.timing)))
    rows.sort(key=lambda row: row[0])
    return table(["step", "timeline", ""], [row for _, row in rows])


# -- one flow ----------------------------------------------------------------------------


def _flow_body(report: FlowReport, usage: Usage, answer: Any) -> str:
    runs = report.runs()
    parts = [
        f"<div><b>{esc(report.name)}</b> {badge(report.status, report.status)} "
        f'<span class="meta">{esc(report.kind)}'
        + (f" {esc(report.version)}" if report.version else "")
        + f" · {secs(report.duration)} · {len(report.steps)} steps · {len(runs)} runs · "
        f"run {esc(report.run_id)}"
        + (f" · session {esc(report.session_id)}" if report.session_id else "")
        + "</span></div>",
        f"<div>{usage_line(usage)}</div>",
    ]
    if report.error:
        parts.append(_error(report.error))
    if answer is not None and answer != "":
        parts.append(f'<div class="out">{esc(clip(answer, 2000))}</div>')
    parts.append(_steps(report))
    return "".join(parts)


def _steps(report: FlowReport) -> str:
    """One row per step (every iteration and retry kept; the first ROWS), a bar on the
    flow's span, its runs folded in the row."""
    start = report.started_at
    ends = [step.ended_at for step in report.steps if step.ended_at]
    end = max([report.ended_at or start, *ends])
    span = max((end - start).total_seconds(), 1e-9)
    rows = []
    for step in report.steps[:ROWS]:
        left = (step.started_at - start).total_seconds() / span
        width = ((step.ended_at or end) - start).total_seconds() / span - left
        kind = "bad" if step.status == "failed" else "step"
        # A supervisor's iterations, a workflow's revisits (a Goto loop); not a first visit.
        shown = step.iteration is not None and (report.kind == "supervisor" or step.iteration > 1)
        label = esc(step.name) + (
            f' <span class="meta">{"iteration" if report.kind == "supervisor" else "visit"} '
            f"{step.iteration}</span>"
            if shown
            else ""
        )
        detail = _error(step.error) if step.error else ""
        for run in step.runs:
            tags = [f"branch {run.branch}"] if run.branch is not None else []
            if step.attempts > 1:
                tags.append(f"attempt {run.attempt}")
            detail += _folded(run.report, _kind(run.report), " · ".join(tags))
        rows.append(
            f"<tr><td>{label}{detail}</td><td>{esc(step.kind)}</td>"
            f"<td>{badge(step.status, step.status)}</td><td>{step.attempts}</td>"
            f"<td>{bar(left, max(width, 0.0), kind)}</td><td>{secs(step.duration)}</td></tr>"
        )
    listed = table(["step", "kind", "status", "attempts", "timeline", ""], rows)
    return listed + more(len(report.steps))


def _folded(report: RunReport, label: str, tags: str = "") -> str:
    """A run under a step or a tool call, folded: its name and status, then its view."""
    if isinstance(report, FlowReport):
        body = _flow_body(report, report.total_usage(), None)
    else:
        body = _run_body(report, report.total_usage(), "")
    meta = f' <span class="meta">{esc(tags)}</span>' if tags else ""
    return (
        f"<details><summary>{esc(label)} {esc(report.name)} "
        f"{badge(report.status, report.status)}{meta}</summary>{body}</details>"
    )


def _kind(report: RunReport) -> str:
    return report.kind if isinstance(report, FlowReport) else "run"


# -- pieces ------------------------------------------------------------------------------


def _error(error: dict[str, Any]) -> str:
    code, message = error.get("code", ""), error.get("message", "")
    return f'<div class="err">{esc(code)}: {esc(message)}</div>'


def _tier(tier: str | None) -> str:
    # A tier is shown when it is not the provider's standard one.
    return f" · {esc(tier)}" if tier not in (None, "default", "standard") else ""


def _row(cells: str, timing: Timing) -> str:
    return f"<tr>{cells}<td>{secs(timing.duration)}</td></tr>"

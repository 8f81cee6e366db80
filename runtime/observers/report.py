"""What a run returns: the result, and a report of everything it did."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..compaction._policy import CompactionRecord
from ..errors import RaygentError
from ..messages import Message, ProviderBlock
from ..usage import Usage

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


class PendingCall(BaseModel):
    """A tool call waiting for approval: what the model asked for, nothing run yet."""

    call_id: str
    tool: str
    arguments: dict[str, Any] | None
    trip_index: int


class ResumeRecord(BaseModel):
    """One resume of a durable run: where it picked up and what it had to redo."""

    at: datetime
    from_trip: int
    reran_calls: list[str] = Field(default_factory=list)
    approvals: dict[str, str] = Field(default_factory=dict)
    forced: bool = False
    drift: list[str] = Field(default_factory=list)
    already_resolved: bool = False


class AgentReport(BaseModel):
    """Everything one run did. `session_id` is stamped on every node, nested runs included."""

    model_config = ConfigDict(extra="forbid")
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

    def to_json(self, indent: int | None = None) -> str:
        """The whole tree as JSON, nested runs included; `from_json` reads it back."""
        return self.model_dump_json(indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> AgentReport:
        return cls.model_validate_json(text)

    def _repr_html_(self) -> str:
        from .views import report_html

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

    def to_json(self, indent: int | None = None) -> str:
        return self.model_dump_json(indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> FlowReport:
        return cls.model_validate_json(text)

    def _repr_html_(self) -> str:
        from .views import report_html

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
    given, else None. `blocks` (provider blocks such as thinking) is set only for
    single-trip runs.
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
        from .views import report_html

        return report_html(self.report, result=self)


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
        from .views import report_html

        return report_html(self.report, result=self)

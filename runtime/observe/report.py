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
    "ModelInfo",
    "PendingCall",
    "ResumeRecord",
    "RunStatus",
    "RunTrail",
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
    output: str | None = None
    error: dict[str, Any] | None = None
    trip_index: int
    timing: Timing
    session_id: str | None = None
    child: AgentReport | None = None


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
        from ._html import report_html

        return report_html(self)


@dataclass(frozen=True)
class RunTrail:
    """What an unfinished run on a session handed its save policy: its new messages in
    order and the appends it numbered. A retry of the run continues from it (see
    `raygent.agents._continue`)."""

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
        from ._html import report_html

        return report_html(self.report, result=self)

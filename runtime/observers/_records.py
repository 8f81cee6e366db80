"""The records a durable run's report keeps: tool calls awaiting approval, resumes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

__all__ = ["PendingCall", "ResumeRecord"]


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

"""The identity of a run, as middleware and nested runs see it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["RunInfo"]


@dataclass(frozen=True, slots=True)
class RunInfo:
    """Who is running: ids that tie nested runs to their root, the session, the agent."""

    run_id: str
    root_run_id: str
    parent_run_id: str | None
    session_id: str | None
    agent_name: str
    deps: Any = None

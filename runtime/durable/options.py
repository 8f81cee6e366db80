"""Durable runs and tool approval: what a user configures and decides.

`Durable(store=...)` on an agent (or per call) writes the run's state to the store after
every settled trip, so `agent.resume(run_id)` continues it in another process after a
crash. A tool with `approval=` stops the run before its call (status
`awaiting_approval`) until `agent.resume(run_id, approvals={call_id: Approve() |
Deny(reason)})` decides.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from raygent.stores import RunStore

from ..observers.report import PendingCall

__all__ = ["ApprovalHandler", "Approve", "Decision", "Decisions", "Deny", "Durable"]


@dataclass(frozen=True)
class Durable:
    """Where a durable run keeps its state: any raygent store (in-memory, SQLite, Redis).

    Runs live beside the store's conversations under their own keys, with the store's
    tenant isolation, `ttl=` and `prune()`. `delete_on_complete`: once the run completes,
    its trip entries are dropped and only its outcome is kept (what a repeated resume
    returns); False keeps every entry for inspection.
    """

    store: RunStore
    delete_on_complete: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.store, RunStore):
            raise TypeError(
                f"Durable(store=...) needs a raygent store, not {type(self.store).__name__}"
            )


@dataclass(frozen=True)
class Approve:
    """Run the call as the model asked."""


@dataclass(frozen=True)
class Deny:
    """Do not run the call: the model gets `reason` as the tool's error result."""

    reason: str = "the call was not approved"


Decision: TypeAlias = Approve | Deny
Decisions: TypeAlias = Mapping[str, Decision]
# Answers pending calls in the process (a notebook, a script) without stopping the run.
ApprovalHandler: TypeAlias = Callable[[Sequence[PendingCall]], Decisions | Awaitable[Decisions]]


def decision_label(decision: Any) -> str:
    """How a decision is recorded in the report (`approved`, or `denied: reason`)."""
    if isinstance(decision, Approve):
        return "approved"
    if isinstance(decision, Deny):
        return f"denied: {decision.reason}"
    raise TypeError(f"a decision is raygent.Approve() or raygent.Deny(reason), not {decision!r}")

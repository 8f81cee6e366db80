"""Which tool calls of a round wait for approval, and what was decided about them.

A call needs approval when its tool says so (`approval=True`, or a policy that returns
True for it). Decisions come from `resume(approvals=...)` (kept on the run) or from the
run's `approval_handler`; a call with no decision stops the run (`AwaitingApproval`).
"""

from __future__ import annotations

from ..durable.options import Deny, decision_label
from ..messages import ToolCall
from ..observers.report import PendingCall
from ..redaction import logger as redacting_logger
from ._state import RunState, maybe_await
from ._tool_round import tool_context

__all__ = ["AwaitingApproval", "decide"]

log = redacting_logger("raygent.agents")


class AwaitingApproval(Exception):
    """Raised inside the loop to stop a run whose calls wait for approval."""

    def __init__(self, pending: list[PendingCall]) -> None:
        super().__init__(f"{len(pending)} call(s) await approval")
        self.pending = pending


async def decide(run: RunState, trip_index: int, calls: list[ToolCall]) -> dict[str, str] | None:
    """The denied calls (call_id -> reason), or None while any call still waits (then
    `run.report.pending` lists the ones that wait)."""
    needing = [c for c in calls if await _needs_approval(run, trip_index, c)]
    if not needing:
        return {}
    undecided = [c for c in needing if c.call_id not in run.approvals]
    handler = run.config.approval_handler
    if undecided and handler is not None:
        answered = await maybe_await(handler(pending_calls(undecided, trip_index)))
        for call_id, decision in dict(answered).items():
            decision_label(decision)  # a TypeError for anything but Approve / Deny
            run.approvals[call_id] = decision
        undecided = [c for c in needing if c.call_id not in run.approvals]
    if undecided:
        run.report.pending = pending_calls(undecided, trip_index)
        return None
    run.report.pending = []
    denied: dict[str, str] = {}
    for call in needing:
        decision = run.approvals[call.call_id]
        if isinstance(decision, Deny):
            denied[call.call_id] = decision.reason
    return denied


def pending_calls(calls: list[ToolCall], trip_index: int) -> list[PendingCall]:
    return [
        PendingCall(call_id=c.call_id, tool=c.name, arguments=c.arguments, trip_index=trip_index)
        for c in calls
    ]


async def _needs_approval(run: RunState, trip_index: int, call: ToolCall) -> bool:
    tool = run.config.tools.get(call.name)
    if tool is None or tool.approval is False:
        return False
    if tool.approval is True:
        return True
    try:
        return bool(await maybe_await(tool.approval(call, tool_context(run, trip_index, call))))
    except Exception as exc:
        # A policy that cannot decide asks a human rather than letting the call run.
        log.warning("approval policy of tool %r raised %r: the call waits", call.name, exc)
        return True

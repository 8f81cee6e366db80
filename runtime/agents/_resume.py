"""Resuming a durable run: load it, check the agent has not drifted, claim it, rebuild
the run's state from its header and entries, and go on where it stood.

A refused resume (not found, drift, lost claim) changes nothing in the store and ends as
a failed result like any run that cannot start. A completed run returns its outcome
again (`already_resolved`): its tools never run twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..durable.journal import load
from ..durable.options import Decision, Durable, decision_label
from ..durable.scope import scope_of
from ..errors import (
    AbortedError,
    DriftError,
    InvalidOptionsError,
    RaygentError,
    RunNotFoundError,
)
from ..messages import Message
from ..observers.report import AgentReport, AgentResult, ModelInfo, ResumeRecord
from ..run_context import RunInfo
from ..usage import Usage
from ._journal import (
    Entry,
    Header,
    Journal,
    Outcome,
    PendingStep,
    ProgressState,
    SaverMark,
    Signature,
    decode_decisions,
    signature_of,
    with_outputs,
)
from ._loop import drive, lifecycle, settle, tool_step
from ._state import Progress, RunState, now
from ._toolsets import resolve_toolsets

if TYPE_CHECKING:
    from raygent.stores.protocol import RunRecord

    from ..memory.save import RunSaver

__all__ = ["Restored", "error_from_dict", "resume_state"]


@dataclass
class Restored:
    """A run's state as its header and entries left it."""

    header: Header
    messages: list[Message]
    new_messages: list[Message]
    report: AgentReport
    usage: Usage
    progress: ProgressState
    pending: PendingStep
    mark: SaverMark | None
    resumes: list[ResumeRecord] = field(default_factory=list)


def restore(record: RunRecord, run: RunState) -> Restored:
    header = Header.model_validate_json(record.header)
    messages = list(header.messages)
    new = messages[header.new_from :]
    report = AgentReport(
        run_id=header.run_id,
        root_run_id=header.root_run_id,
        parent_run_id=header.parent_run_id,
        session_id=header.session_id,
        name=run.info.agent_name,
        version=run.config.version,
        started_at=header.started_at,
        model=ModelInfo(name=run.config.model.name, provider=run.config.model.provider),
        system_prompt=header.system_prompt,
    )
    usage, progress, pending, mark = Usage(), ProgressState(), PendingStep(), header.saver
    for raw in record.entries:
        entry = Entry.model_validate_json(raw)
        if entry.conversation is not None and entry.new_index is not None:
            messages = list(entry.conversation)
            extra = iter(entry.new_extra or [])
            new = [messages[k] if k >= 0 else next(extra) for k in entry.new_index]
        else:
            messages.extend(entry.added)
            new.extend(entry.added)
        report.trips.extend(entry.trips)
        report.tool_calls.extend(with_outputs(entry))
        report.compactions.extend(entry.compactions)
        report.resumes.extend(entry.resumes)
        usage, progress, pending = entry.usage, entry.progress, entry.pending
        mark = entry.saver or mark
    return Restored(header, messages, new, report, usage, progress, pending, mark)


async def resume_state(
    run: RunState,
    durable: Durable,
    run_id: str,
    *,
    approvals: Mapping[str, Decision] | None,
    force: bool,
    user_id: str | None,
    metadata: Mapping[str, str] | None,
    saver_for: Any,
) -> AgentResult:
    """Resume `run_id` into `run` (prepared by the agent, with no input) and run it to its
    end. `saver_for(session_id, user_id, metadata, run_id)` makes the session's saver."""
    if run.setup_error is not None:
        return await lifecycle(run, Progress(), _never)
    try:
        scope = scope_of(run_id, user_id, metadata)
    except ValueError as exc:
        return await _refused(run, InvalidOptionsError(f"cannot resume: {exc}"))
    try:
        record = await load(durable, scope)
    except RaygentError as exc:
        return await _refused(run, exc)
    if record is None:
        return await _refused(run, RunNotFoundError(f"no durable run {run_id!r} is stored"))
    if record.outcome is not None:
        return already_resolved(run, Outcome.model_validate_json(record.outcome))
    state = restore(record, run)
    try:
        # The signature names the toolsets' tools (an MCP server's): list them first.
        await resolve_toolsets(run)
    except asyncio.CancelledError:
        run.setup_error = AbortedError("cancelled while listing the toolsets' tools")
        await lifecycle(run, Progress(), _never)
        raise
    except Exception as exc:
        return await _refused(run, exc)
    stored, current = state.header.signature, signature_of(run)
    changed = stored.changes(current)
    if changed and not force:
        return await _refused(
            run,
            DriftError(
                f"the agent changed since run {run_id!r} started: "
                f"{', '.join(_described(f, stored, current) for f in changed)}; "
                "resume with force=True to go on anyway (or bump version= on purpose)",
                changed=changed,
                stored=stored.model_dump(),
                current=current.model_dump(),
            ),
        )
    try:
        labels = {k: decision_label(v) for k, v in dict(approvals or {}).items()}
    except (TypeError, ValueError) as exc:
        return await _refused(run, InvalidOptionsError(f"invalid approvals: {exc}"))
    try:
        journal = await Journal.claim(durable, scope, record)
    except RaygentError as exc:
        return await _refused(run, exc)
    _hydrate(run, state, journal)
    run.report.resumes.append(
        ResumeRecord(
            at=now(),
            from_trip=len(state.report.trips),
            approvals=labels,
            forced=bool(changed),
            drift=changed,
        )
    )
    run.report.resumed_from_trip = run.report.resumes[0].from_trip
    header = state.header
    if header.session_id is not None:
        run.saver = saver_for(header.session_id, header.user_id, header.metadata, header.run_id)
    pending = state.pending
    run.approvals = {**decode_decisions(pending.decisions), **dict(approvals or {})}
    progress = Progress(
        segments=list(state.progress.segments),
        continuations=state.progress.continuations,
        repairs=state.progress.repairs,
        purpose=state.progress.purpose,
    )

    async def body(progress: Progress) -> AgentResult:
        if run.saver is not None:
            # The conversation is the journal's; the session is held again for its order
            # and its fence, and the last hand-over is made again (stores skip a batch
            # they hold already).
            await run.saver.open(run.signal)
            await run.saver.hold.take()
            await _replay(run, run.saver, state.mark)
        if pending.kind != "trip":
            await tool_step(
                run,
                progress,
                pending.trip_index,
                pending.calls,
                pending.after,
                reran=pending.kind == "tools",
            )
            run.add(*pending.after)
            await settle(run, progress)
        return await drive(run, progress)

    return await lifecycle(run, progress, body)


def _hydrate(run: RunState, state: Restored, journal: Journal) -> None:
    header = state.header
    run.info = RunInfo(
        run_id=header.run_id,
        root_run_id=header.root_run_id,
        parent_run_id=header.parent_run_id,
        session_id=header.session_id,
        agent_name=run.info.agent_name,
        deps=run.info.deps,
    )
    run.messages = state.messages
    run.new_messages = state.new_messages
    run.saved_count = state.mark.upto if state.mark is not None else len(state.new_messages)
    run.report = state.report
    run.usage = state.usage
    run.journal = journal
    journal.caught_up(run)


async def _replay(run: RunState, saver: RunSaver, mark: SaverMark | None) -> None:
    if mark is None:
        return
    new = run.new_messages
    saver.restore(mark.turn, new[mark.buffer_from : mark.saved])
    batch = new[mark.saved : mark.upto]
    run.saved_count = mark.upto
    if mark.kind == "accepted":
        await saver.accepted(batch)
    else:
        await saver.turn_done(batch)


def _described(field: str, stored: Signature, current: Signature) -> str:
    """A changed field, and for the tools which ones came and went."""
    if field != "tools":
        return field
    added = sorted(set(current.tools) - set(stored.tools))
    gone = sorted(set(stored.tools) - set(current.tools))
    said = [*(f"+{name}" for name in added), *(f"-{name}" for name in gone)]
    return f"tools ({', '.join(said)})"


async def _refused(run: RunState, error: Exception) -> AgentResult:
    run.setup_error = error
    return await lifecycle(run, Progress(), _never)


async def _never(progress: Progress) -> AgentResult:
    raise AssertionError("a run with a setup error never runs its body")


def already_resolved(run: RunState, outcome: Outcome) -> AgentResult:
    """The outcome of a run that ended, as its resume returns it again."""
    report = outcome.report
    report.resumes.append(
        ResumeRecord(at=now(), from_trip=len(report.trips), already_resolved=True)
    )
    data = None
    if outcome.status == "completed" and run.config.output is not None:
        try:
            data = run.config.output.validate(outcome.text)
        except RaygentError:
            data = None
    error = None if outcome.error is None else error_from_dict(outcome.error)
    result = AgentResult(
        data=data, text=outcome.text, blocks=None, report=report, usage=outcome.usage, error=error
    )
    run.result = result
    return result


def error_from_dict(data: Mapping[str, Any]) -> RaygentError:
    """The error a `to_dict()` describes, as its own class where raygent knows it."""
    fields = dict(data)
    code, message = fields.pop("code", None), str(fields.pop("message", ""))
    retryable = fields.pop("retryable", None)
    for key in ("type", "category"):
        fields.pop(key, None)
    cls = next((c for c in _error_classes(RaygentError) if c.code == code), RaygentError)
    try:
        return cls(message, retryable=retryable, **fields)
    except TypeError:
        return RaygentError(message, retryable=retryable, **fields)


def _error_classes(base: type[RaygentError]) -> list[type[RaygentError]]:
    found: list[type[RaygentError]] = []
    for sub in base.__subclasses__():
        found.append(sub)
        found.extend(_error_classes(sub))
    return found

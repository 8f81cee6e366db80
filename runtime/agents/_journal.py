"""A durable run's state in the store: a header when it starts, one entry per settled
step (appends, never the whole conversation again), an outcome when it completes.

Each entry carries what changed since the one before: the messages added (or, after a
compaction, the whole conversation), the new trip, tool-call and compaction reports,
the usage so far, the loop's progress, what the run does next (`pending`), and where
the save policy stood before the step was handed to it (`saver`), so a resume can hand
it over again. Payloads are pydantic JSON; the store sees opaque bytes. They are
written as plain dicts of the run's own models, encoded by pydantic_core in one call
(no model is built or validated per trip); the models below describe them and read them
back, and a field left out of an entry has its default. The record's skeleton (the
epoch fence, the claim, appending entries, the outcome) is `raygent.durable.journal`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import BaseModel, Field
from pydantic_core import to_json

from ..compaction.policy import CompactionRecord
from ..durable.journal import RunJournal
from ..durable.options import Approve, Decision, Deny
from ..messages import Message, ToolCall, ToolMessage
from ..observers.report import AgentReport, ResumeRecord, ToolCallReport, TripReport
from ..usage import Usage
from ._state import Progress, RunState, now

if TYPE_CHECKING:
    from ..observers.report import AgentResult

__all__ = [
    "Entry",
    "Header",
    "Journal",
    "Outcome",
    "PendingStep",
    "SaverMark",
    "Signature",
    "decode_decisions",
    "signature_of",
    "with_outputs",
]

FORMAT = 1
# How long a tool round runs before its reply is written on its own (a quicker round is
# written once, reply and results together: one write per trip instead of two).
REPLY_WRITE_DELAY = 0.05


class Signature(BaseModel):
    """What a resume must agree on with the run's start (drift detection)."""

    provider: str
    model: str
    tools: list[str]
    max_trips: int
    output: bool
    compaction_after_tokens: int | None
    compaction_keep: int | None
    version: str | None
    # The provider's compaction trigger (None: off; absent from older snapshots).
    server_compaction_trigger: int | None = None

    def changes(self, other: Signature) -> list[str]:
        """The fields in which `other` differs from this one."""
        mine, theirs = self.model_dump(), other.model_dump()
        return [name for name in mine if mine[name] != theirs[name]]


class SaverMark(BaseModel):
    """Where the save policy stood before a step's messages were handed to it: `turn` is
    its next turn, `new[buffer_from:saved]` its buffer, `new[saved:upto]` the hand-over."""

    kind: Literal["accepted", "turn"]
    turn: int
    buffer_from: int
    saved: int
    upto: int


class ProgressState(BaseModel):
    segments: list[str] = Field(default_factory=list)
    continuations: int = 0
    repairs: int = 0
    purpose: str = "answer"


class PendingStep(BaseModel):
    """What the run does next: trip again, or finish a step's tool round (its calls, the
    messages after it, the denials), or wait for approvals (the decisions so far)."""

    kind: Literal["trip", "tools", "approval"] = "trip"
    trip_index: int = 0
    calls: list[ToolCall] = Field(default_factory=list)
    after: list[Message] = Field(default_factory=list)
    denied: dict[str, str] = Field(default_factory=dict)
    decisions: dict[str, str] = Field(default_factory=dict)


class Header(BaseModel):
    format: int = FORMAT
    signature: Signature
    run_id: str
    root_run_id: str
    parent_run_id: str | None
    session_id: str | None
    user_id: str | None
    metadata: dict[str, str]
    started_at: datetime
    system_prompt: str | None
    messages: list[Message]
    # The run's own messages (its input first) start here in `messages`.
    new_from: int
    saver: SaverMark | None


class Entry(BaseModel):
    added: list[Message] = Field(default_factory=list)
    # After a compaction: the whole conversation, and the run's own messages as indices
    # into it (-1: not in it any more, taken in order from `new_extra`).
    conversation: list[Message] | None = None
    new_index: list[int] | None = None
    new_extra: list[Message] | None = None
    trips: list[TripReport] = Field(default_factory=list)
    tool_calls: list[ToolCallReport] = Field(default_factory=list)
    # The calls whose output is left out of `tool_calls`: it is the text of their tool
    # message in `added` (written once, not twice).
    outputs_in_messages: list[str] = Field(default_factory=list)
    compactions: list[CompactionRecord] = Field(default_factory=list)
    resumes: list[ResumeRecord] = Field(default_factory=list)
    usage: Usage
    progress: ProgressState
    pending: PendingStep
    saver: SaverMark | None = None


class Outcome(BaseModel):
    """A completed (or abandoned) run, as a repeated resume returns it."""

    status: str
    text: str
    report: AgentReport
    usage: Usage
    error: dict[str, Any] | None = None


def signature_of(run: RunState) -> Signature:
    config = run.config
    compaction, server = config.compaction, config.options.server_compaction
    return Signature(
        provider=config.model.provider,
        model=config.model.name,
        tools=sorted(config.tools),
        max_trips=config.max_trips,
        output=config.output is not None,
        compaction_after_tokens=None if compaction is None else compaction.after_tokens,
        compaction_keep=None if compaction is None else compaction.keep,
        version=config.version,
        server_compaction_trigger=server.trigger if server is not None else None,
    )


def encode_decisions(decisions: dict[str, Decision]) -> dict[str, str]:
    return {
        call_id: "approve" if isinstance(d, Approve) else f"deny:{d.reason}"
        for call_id, d in decisions.items()
    }


def decode_decisions(stored: dict[str, str]) -> dict[str, Decision]:
    return {
        call_id: Approve() if text == "approve" else Deny(reason=text.removeprefix("deny:"))
        for call_id, text in stored.items()
    }


@dataclass
class Journal(RunJournal):
    """Writes one run's state; `epoch` is the fencing token its writes carry."""

    # How much of the run the entries written so far cover.
    _written: Covered = field(default_factory=lambda: Covered(0, 0, 0, 0, 0, 0))
    _alarm: _Alarm = field(default_factory=lambda: _Alarm())

    async def start(self, run: RunState) -> None:
        """The run's header: who, the agent's signature, the conversation at its start."""
        header = {  # a Header
            "format": FORMAT,
            "signature": signature_of(run),
            "run_id": run.info.run_id,
            "root_run_id": run.info.root_run_id,
            "parent_run_id": run.info.parent_run_id,
            "session_id": run.info.session_id,
            "user_id": self.scope.user_id,
            "metadata": dict(self.scope.metadata),
            "started_at": run.report.started_at,
            "system_prompt": run.report.system_prompt,
            "messages": run.messages,
            "new_from": len(run.messages) - len(run.new_messages),
            "saver": mark(run, "accepted"),
        }
        await self.begin(to_json(header))
        self.caught_up(run)
        if run.saver is not None:
            await run.saver.hold.take()  # the session waits for this run until it ends

    async def settled(self, run: RunState, progress: Progress) -> None:
        """A step is done and the run trips next."""
        await self._write(run, progress, _NEXT_TRIP, mark(run, "turn"))

    def reply(
        self,
        run: RunState,
        progress: Progress,
        trip_index: int,
        calls: list[ToolCall],
        after: list[Message],
        denied: dict[str, str],
    ) -> ReplyWrite:
        """A reply is in and its tool round is about to run. Written once the round has
        run for `REPLY_WRITE_DELAY` (a crash after that keeps the reply: its calls run
        again on resume); a quicker round is written once, with its results."""
        decided = dict(run.approvals)  # a copy: decisions made later are not this entry's
        covered, usage, state = covered_by(run), run.usage, progress_state(progress)

        def entry() -> dict[str, Any]:
            # Built only if it is written; what it says was fixed when the reply came.
            pending = _round("tools", trip_index, calls, after, decided, denied)
            return self._entry(run, state, pending, None, covered, usage)

        return ReplyWrite(self, entry, covered)

    async def awaiting(
        self,
        run: RunState,
        progress: Progress,
        trip_index: int,
        calls: list[ToolCall],
        after: list[Message],
    ) -> None:
        """The round waits for approvals: the decisions so far are kept."""
        pending = _round("approval", trip_index, calls, after, run.approvals, {})
        await self._write(run, progress, pending, None)

    async def finish(self, run: RunState, result: AgentResult) -> None:
        """The run completed: keep its outcome (and, unless asked to drop them, its
        entries)."""
        report = run.report.model_copy(update={"status": "completed", "ended_at": now()})
        outcome = {  # an Outcome
            "status": "completed",
            "text": result.text,
            "report": report,
            "usage": run.usage,
        }
        await self.end(to_json(outcome))

    async def _write(
        self,
        run: RunState,
        progress: Progress,
        pending: dict[str, Any],
        saver: SaverMark | None,
    ) -> None:
        covered = covered_by(run)
        entry = self._entry(run, progress_state(progress), pending, saver, covered, run.usage)
        await self.store_entry(entry, covered)

    def _entry(
        self,
        run: RunState,
        progress: dict[str, Any],
        pending: dict[str, Any],
        saver: SaverMark | None,
        covered: Covered,
        usage: Usage,
    ) -> dict[str, Any]:
        """What changed since the last entry, up to `covered`, as an Entry's fields (the
        empty ones left out: they decode to their defaults)."""
        report = run.report
        written = self._written
        entry: dict[str, Any] = {}
        if covered.applied != written.applied:
            # A compaction rewrote the conversation: write it whole, once.
            at = {id(m): k for k, m in enumerate(run.messages)}
            entry["conversation"] = list(run.messages)
            entry["new_index"] = [at.get(id(m), -1) for m in run.new_messages]
            entry["new_extra"] = [m for m in run.new_messages if id(m) not in at]
        else:
            entry["added"] = run.new_messages[written.new : covered.new]
        if covered.trips != written.trips:
            entry["trips"] = report.trips[written.trips : covered.trips]
        if covered.tools != written.tools:
            calls = report.tool_calls[written.tools : covered.tools]
            entry["tool_calls"], shared = _outputs_apart(calls, entry.get("added", ()))
            if shared:
                entry["outputs_in_messages"] = shared
        if covered.compactions != written.compactions:
            entry["compactions"] = report.compactions[written.compactions : covered.compactions]
        if covered.resumes != written.resumes:
            entry["resumes"] = report.resumes[written.resumes : covered.resumes]
        entry["usage"] = usage
        entry["progress"] = progress
        entry["pending"] = pending
        if saver is not None:
            entry["saver"] = saver
        return entry

    async def store_entry(self, entry: dict[str, Any], covered: Covered) -> None:
        await self.append(to_json(entry))
        self._written = covered

    def caught_up(self, run: RunState) -> None:
        """Everything the run holds now is written (after start, or after a resume)."""
        self._written = covered_by(run)


class Covered(NamedTuple):
    """How much of a run an entry covers."""

    new: int
    trips: int
    tools: int
    compactions: int
    resumes: int
    applied: int


def covered_by(run: RunState) -> Covered:
    report = run.report
    compactions = report.compactions
    return Covered(
        len(run.new_messages),
        len(report.trips),
        len(report.tool_calls),
        len(compactions),
        len(report.resumes),
        _applied(run) if compactions else 0,
    )


class ReplyWrite:
    """The entry of a reply whose tool round is running, written after a delay unless
    the round ends first (then the round's own entry covers the reply too)."""

    def __init__(
        self, journal: Journal, entry: Callable[[], dict[str, Any]], covered: Covered
    ) -> None:
        self._journal, self._entry, self._covered = journal, entry, covered
        self._task: asyncio.Future[None] | None = None
        self.due = asyncio.get_running_loop().time() + REPLY_WRITE_DELAY
        journal._alarm.arm(self)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._journal.store_entry(self._entry(), self._covered))
        # A run that failed meanwhile does not wait for it: its error is not lost either.
        self._task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def done(self) -> None:
        """The round is done: wait for the write if it started, else drop it."""
        self._journal._alarm.disarm(self)
        if self._task is not None:
            await self._task

    def cancel(self) -> None:
        """The round failed: no write starts now (one already started goes on)."""
        self._journal._alarm.disarm(self)


class _Alarm:
    """One timer for a journal's reply writes. A round arms it for its own time; a timer
    already set (by an earlier round, for an earlier time) sets itself again when it
    fires, and a round that ends first just disarms it. Quick rounds so cost no timer
    each (asyncio's timers are Python objects in a heap, and cancelled ones stay there)."""

    def __init__(self) -> None:
        self._write: ReplyWrite | None = None
        self._at: float | None = None  # when the timer that is set fires

    def arm(self, write: ReplyWrite) -> None:
        self._write = write
        if self._at is None:
            self._set(write.due)

    def disarm(self, write: ReplyWrite) -> None:
        if self._write is write:
            self._write = None

    def _set(self, when: float) -> None:
        self._at = when
        asyncio.get_running_loop().call_at(when, self._fire)

    def _fire(self) -> None:
        at, self._at = self._at, None
        write = self._write
        if write is None or at is None:
            return
        if write.due <= at:
            self._write = None
            write.start()
        else:
            self._set(write.due)


_NEXT_TRIP: dict[str, Any] = {}  # a PendingStep: its defaults, trip next


def _round(
    kind: Literal["tools", "approval"],
    trip_index: int,
    calls: list[ToolCall],
    after: list[Message],
    decisions: dict[str, Decision],
    denied: dict[str, str],
) -> dict[str, Any]:
    """A tool round still to run, with the decisions made on its calls (a PendingStep)."""
    ids = {c.call_id for c in calls}
    return {
        "kind": kind,
        "trip_index": trip_index,
        "calls": calls,
        "after": after,
        "denied": denied,
        "decisions": encode_decisions({k: v for k, v in decisions.items() if k in ids}),
    }


def _outputs_apart(
    calls: list[ToolCallReport], added: list[Message]
) -> tuple[list[Any], list[str]]:
    """The call reports to write, without the outputs that their tool message in `added`
    already holds as its text, and the ids of those calls."""
    texts = {m.call_id: m.text for m in added if isinstance(m, ToolMessage)}
    if not texts:
        return calls, []
    written: list[Any] = []
    shared: list[str] = []
    for call in calls:
        if call.output is not None and texts.get(call.call_id) == call.output:
            written.append(dict(call.__dict__, output=None))  # a ToolCallReport's fields
            shared.append(call.call_id)
        else:
            written.append(call)
    return written, shared


def with_outputs(entry: Entry) -> list[ToolCallReport]:
    """An entry's call reports with the outputs it left to their tool messages."""
    if entry.outputs_in_messages:
        texts = {m.call_id: m.text for m in entry.added if isinstance(m, ToolMessage)}
        for call in entry.tool_calls:
            if call.call_id in entry.outputs_in_messages:
                call.output = texts[call.call_id]
    return entry.tool_calls


def progress_state(progress: Progress) -> dict[str, Any]:
    """The loop's progress, as a ProgressState."""
    return {
        "segments": list(progress.segments),
        "continuations": progress.continuations,
        "repairs": progress.repairs,
        "purpose": progress.purpose,
    }


def mark(run: RunState, kind: Literal["accepted", "turn"]) -> SaverMark | None:
    """Where the save policy stands now (None without a session)."""
    if run.saver is None:
        return None
    turn, buffered = run.saver.position
    saved = run.saved_count
    return SaverMark(
        kind=kind, turn=turn, buffer_from=saved - buffered, saved=saved, upto=len(run.new_messages)
    )


def _applied(run: RunState) -> int:
    # Only a client compaction rewrites the conversation (a server one adds a turn).
    return sum(1 for c in run.report.compactions if c.status == "applied" and c.kind == "client")

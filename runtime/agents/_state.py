"""The mutable state of one run: the conversation so far, usage, the report being built."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..abort import AbortController
from ..budgets import BudgetLedger
from ..memory.save import RunSaver
from ..messages import Message, ToolCall
from ..models.contract import Model, ModelOptions, ModelResponse
from ..observers import Observer
from ..observers.events import Dispatcher, Event
from ..observers.report import AgentReport, AgentResult, ModelInfo
from ..run_context import RunInfo
from ..seams.attempt import NO_SCOPE, RunScope
from ..seams.contract import Backend, ModelAccess
from ..seams.request import ONLINE, ModelRequest, RequestContext, RequestRecord
from ..seams.request_path import request_path
from ..usage import Usage
from .middleware import Middleware
from .output import OutputSpec, Repair

if TYPE_CHECKING:
    from ..attachments import AttachmentPolicy
    from ..cache import ResponseCache
    from ..compaction.policy import Compaction
    from ..durable.options import ApprovalHandler, Decision
    from ..tools import Tool
    from ..toolsets import Toolset

Phase = Literal["starting", "trip", "tools", "between_trips", "done"]
ToolErrors = Literal["continue", "fail"]


def now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class RunConfig:
    """Everything a run needs, resolved from the agent and the call's options."""

    model: Model
    backend: Backend
    tools: Mapping[str, Tool[..., Any]]
    options: ModelOptions
    output: OutputSpec | None
    repair: Repair | None
    max_trips: int
    continue_on_output_limit: int
    capture_messages: bool
    middleware: tuple[Middleware, ...]
    streaming: bool
    guard_max_buffer: int | None
    version: str | None
    compaction: Compaction | None = None
    approval_handler: ApprovalHandler | None = None
    # Resolved into `tools` and `options.tools` when the run starts (_toolsets.py).
    toolsets: tuple[Toolset, ...] = ()
    tool_schemas: Literal["full", "compact"] = "full"
    # What an image of a tool's result may be (None: the default policy).
    attachment_policy: AttachmentPolicy | None = None
    # Replies kept by request (raygent.ResponseCache); None: every trip is sent.
    cache: ResponseCache | None = None
    # "fail": a tool call that fails fails the run (TOOL_EXECUTION) instead of the model
    # reading the error and going on ("continue").
    tool_errors: ToolErrors = "continue"
    # The budgets each request of the run is held to (its own, its job's, its parent's).
    ledgers: tuple[BudgetLedger, ...] = ()
    # What the run inherited from where it runs (its batch attempt, its parent run).
    scope: RunScope = NO_SCOPE
    _online: ModelAccess | None = field(default=None, init=False, repr=False)

    def models(self, trip: int | None = None) -> ModelAccess:
        """The model access of the run's trip number `trip` (by its provider-batch lines,
        if the run has some), or of a request that goes online (`trip` None: a
        compaction's), built by the request path from the run's cache and budgets."""
        lines = self.scope.lines
        if trip is not None and lines is not None:
            return request_path(
                self.backend.models, cache=self.cache, ledgers=self.ledgers, lines=lines, trip=trip
            )
        online = self._online
        if online is None:  # the same for every trip: built once
            online = self._online = request_path(
                self.backend.models, cache=self.cache, ledgers=self.ledgers
            )
        return online


@dataclass
class Progress:
    """What the loop carries from trip to trip.

    `segments` holds the text of earlier trips that the answer continues (a paused or
    cut-off reply); `last` is the latest reply whose text is not in `segments` yet.
    """

    segments: list[str] = field(default_factory=list)
    continuations: int = 0
    repairs: int = 0
    purpose: str = "answer"
    last: ModelResponse | None = None

    def text(self) -> str:
        """The answer so far: the carried segments and the latest reply's text."""
        tail = self.last.text if self.last is not None else ""
        return "".join([*self.segments, tail])

    def carry(self) -> None:
        """The next reply continues the latest one: keep its text as a segment."""
        if self.last is not None:
            self.segments.append(self.last.text)
            self.last = None

    def restart(self) -> None:
        """The next reply is a new answer (after tool results, or a repair)."""
        self.segments.clear()


class PendingWrite(Protocol):
    """The write of a reply whose tool round is running (`JournalWriter.reply`)."""

    async def done(self) -> None:
        """The round is done: wait for the write if it started, else drop it."""

    def cancel(self) -> None:
        """The round failed: no write starts now."""


class JournalWriter(Protocol):
    """Where a durable run writes its state (`_journal.Journal`): the header when it
    starts, an entry after every settled step, the outcome when it completes."""

    async def start(self, run: RunState) -> None: ...

    async def settled(self, run: RunState, progress: Progress) -> None: ...

    def reply(
        self,
        run: RunState,
        progress: Progress,
        trip_index: int,
        calls: list[ToolCall],
        after: list[Message],
        denied: dict[str, str],
    ) -> PendingWrite: ...

    async def awaiting(
        self,
        run: RunState,
        progress: Progress,
        trip_index: int,
        calls: list[ToolCall],
        after: list[Message],
    ) -> None: ...

    async def finish(self, run: RunState, result: AgentResult) -> None: ...


@dataclass
class RunState:
    info: RunInfo
    config: RunConfig
    events: Dispatcher
    abort: AbortController
    messages: list[Message]
    new_messages: list[Message] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    phase: Phase = "starting"
    report: AgentReport = field(init=False)
    result: AgentResult | None = None
    # Why the run could not start (bad options or input); raised inside the loop, so
    # that it ends as a failed result like any other failure.
    setup_error: Exception | None = None
    # Saves to the session's store by the memory's policy (None: no memory).
    saver: RunSaver | None = None
    # Who gets the finished report (raygent.observers); none for a nested run.
    observers: tuple[Observer, ...] = ()
    # A durable run writes its state here after every settled step (None: not durable).
    journal: JournalWriter | None = None
    # Decisions on calls awaiting approval, given to `resume(approvals=...)`.
    approvals: dict[str, Decision] = field(default_factory=dict)
    _saved: int = 0
    # Detaches the run from the caller's abort signal once it ends.
    unlink: Callable[[], None] = field(default=lambda: None)

    def __post_init__(self) -> None:
        self.report = AgentReport(
            run_id=self.info.run_id,
            root_run_id=self.info.root_run_id,
            parent_run_id=self.info.parent_run_id,
            session_id=self.info.session_id,
            tenant=None if self.config.scope.tenant is None else self.config.scope.tenant.name,
            name=self.info.agent_name,
            version=self.config.version,
            started_at=now(),
            model=ModelInfo(name=self.config.model.name, provider=self.config.model.provider),
        )

    @property
    def signal(self) -> Any:
        return self.abort.signal

    @property
    def trip_count(self) -> int:
        return len(self.report.trips)

    def request(self, trip: int, record: RequestRecord | None = None) -> ModelRequest:
        """Trip number `trip`'s model request: the conversation so far, with its context
        (`record`: where what happens to it is written)."""
        config, info, scope = self.config, self.info, self.config.scope
        context = RequestContext(
            info.run_id,
            info.session_id,
            scope.job,
            scope.tenant,
            trip,
            scope.deadline,
            ONLINE,
            record,
        )
        return ModelRequest(config.model, self.messages, config.options, self.abort.signal, context)

    def insert_history(self, history: list[Message]) -> None:
        """Stored history goes after the system prompt, before any history given."""
        at = 0
        while at < len(self.messages) and self.messages[at].role == "system":
            at += 1
        self.messages[at:at] = history

    @property
    def saved_count(self) -> int:
        """How many of the new messages were handed to the saver."""
        return self._saved

    @saved_count.setter
    def saved_count(self, count: int) -> None:
        self._saved = count

    def unsaved(self) -> list[Message]:
        """New messages not yet handed to the saver (and now handed)."""
        batch = self.new_messages[self._saved :]
        self._saved = len(self.new_messages)
        return batch

    def add(self, *messages: Message) -> None:
        self.messages.extend(messages)
        self.new_messages.extend(messages)

    async def emit(self, event_type: type[Event], **fields: Any) -> None:
        """Build and deliver an event, only when someone listens to it."""
        if self.events.wants(event_type.type):
            await self.events.emit(
                event_type(run_id=self.info.run_id, root_run_id=self.info.root_run_id, **fields)
            )


async def maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value

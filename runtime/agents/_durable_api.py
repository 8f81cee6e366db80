"""The agent's durable-run methods: resume (awaited, sync, streamed) and abandon."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from typing_extensions import Unpack

from raygent.stores import InMemoryStore

from .._sync import run_sync
from ..attachments import AttachmentLike, AttachmentPolicy
from ..durable.journal import encoded, is_stored, load
from ..durable.options import Decision, Durable
from ..durable.scope import run_scope, scope_of
from ..errors import AgentCancelledError, InvalidOptionsError, PromptError, RaygentError
from ..memory.hold import SessionHold
from ..memory.save import RunSaver, default_memory
from ..messages import Message
from ..observers.events import Event
from ..observers.report import AgentResult
from ..run_context import RunInfo
from ..seams.attempt import inherited
from ._journal import Journal, Outcome
from ._options import RunOptions
from ._resume import already_resolved, restore, resume_state
from ._state import RunState
from ._stream import AgentStream

if TYPE_CHECKING:
    from ..memory import Memory
    from ..tools import Tool

__all__ = ["DurableRuns", "journal_for"]

# What a resume takes from the stored run, not from its own options.
_STORED_OPTIONS = (
    "history",
    "session_id",
    "attachments",
    "run_id",
    "resume",
)
_default: Durable | None = None


def default_durable() -> Durable:
    """Where runs with approval tools wait when no `durable=` is given: this process's
    memory (resumable here, until the process ends)."""
    global _default
    if _default is None:
        _default = Durable(store=InMemoryStore())
    return _default


def journal_for(
    durable: Durable | None, info: RunInfo, options: RunOptions
) -> tuple[Journal | None, RaygentError | None]:
    if durable is None:
        return None, None
    try:
        scope = run_scope(info.run_id, options)
    except ValueError as exc:
        return None, InvalidOptionsError(f"invalid run options: {exc}")
    return Journal(durable, scope), None


class DurableRuns:
    """Resume and abandon, for `Agent`."""

    durable: Durable | None
    memory: Memory | None
    tools: dict[str, Tool[..., Any]]

    def _prepare(
        self,
        input: Any,
        options: RunOptions,
        *,
        streaming: bool,
        sink: Callable[[Event], None] | None,
    ) -> tuple[RunState, list[Message]]:
        raise NotImplementedError

    def _attachments(
        self, options: RunOptions
    ) -> tuple[Sequence[AttachmentLike] | None, AttachmentPolicy]:
        raise NotImplementedError

    def _durable_for(self, options: RunOptions) -> Durable | None:
        durable = options.get("durable") or self.durable
        if durable is None and any(t.approval is not False for t in self.tools.values()):
            durable = default_durable()
        if durable is not None and not isinstance(durable, Durable):
            raise TypeError("durable= takes raygent.Durable(store=...)")
        return durable

    def _prepare_resume(self, options: RunOptions) -> RunState:
        """A resumed run takes its id and what it stored from the store: of its scope it
        keeps what holds it (its job's budget), not a batch attempt's continuation."""
        resumed = {**_resume_options(options), "scope": inherited(options).resumed()}
        return self._prepare([], resumed, streaming=False, sink=None)[0]  # type: ignore[arg-type]

    async def resume(
        self,
        run: str,
        /,
        *,
        approvals: Mapping[str, Decision] | None = None,
        force: bool = False,
        **options: Unpack[RunOptions],
    ) -> AgentResult:
        """Continue a durable run from its last settled step. Never raises, like execute:
        completed trips are not sent again, the tool calls of a round that had not settled
        run again (`report.resumes[-1].reran_calls`), usage is not counted twice.
        `approvals` decides calls awaiting approval; a resume of a run that already
        completed returns its result again. An agent whose signature differs from the
        run's start (provider, model, tools, max_trips, output, compaction, version)
        gets a failed result with `DriftError` and changes nothing; `force=True` resumes
        anyway. `user_id` / `metadata` name the run's tenant as they did at its start."""
        state = self._prepare_resume(options)
        return await self._resume_into(state, run, approvals, force, options)

    def resume_sync(
        self,
        run: str,
        /,
        *,
        approvals: Mapping[str, Decision] | None = None,
        force: bool = False,
        **options: Unpack[RunOptions],
    ) -> AgentResult:
        """`resume` from synchronous code (inside a running loop too, like execute_sync)."""
        return run_sync(lambda: self.resume(run, approvals=approvals, force=force, **options))

    def stream_resume(
        self,
        run: str,
        /,
        *,
        approvals: Mapping[str, Decision] | None = None,
        force: bool = False,
        **options: Unpack[RunOptions],
    ) -> AgentStream:
        """`resume`, yielding the run's events as `stream` does."""

        def resume(state: RunState) -> Any:
            return self._resume_into(state, run, approvals, force, options)

        return AgentStream(self, [], _resume_options(options), resume)

    async def abandon(
        self, run: str, /, *, reason: str = "abandoned", **options: Unpack[RunOptions]
    ) -> AgentResult:
        """End a durable run without finishing it: it becomes cancelled, its session
        records the error (as a failed run's would be), and a later resume returns this
        result. A run that already ended is returned as it ended."""
        state = self._prepare_resume(options)
        durable = self._durable_for(options)
        if durable is None:
            return await self._resume_into(state, run, None, False, options)
        scope = run_scope(run, options)
        record = await load(durable, scope)
        if record is None or record.outcome is not None:
            return await self._resume_into(state, run, None, True, options)
        restored = restore(record, state)
        error = AgentCancelledError(
            f"the run was abandoned: {reason}", cancelled_at="abandoned", reason=reason
        )
        journal = await Journal.claim(durable, scope, record)
        report = restored.report
        report.status, report.error = "cancelled", error.to_dict()
        outcome = Outcome(
            status="cancelled", text="", report=report, usage=restored.usage, error=error.to_dict()
        )
        await journal.end(encoded(outcome))
        header = restored.header
        if header.session_id is not None:
            memory = self.memory or default_memory()
            session = scope_of(header.session_id, header.user_id, header.metadata)
            await memory.store.record_error(session, run, error, restored.new_messages)
            await SessionHold(memory.store, session, run).release()
        result = already_resolved(state, outcome)
        result.report.resumes.pop()  # abandoning is not a resume
        return result

    async def is_stored(self, run: str, /, **options: Unpack[RunOptions]) -> bool:
        """Whether a durable run is stored under `run` (in the store `durable=` names, for
        the tenant `user_id` / `metadata` name), open or ended."""
        durable = self._durable_for(options)
        if durable is None:
            return False
        return await is_stored(durable, run_scope(run, options))

    async def _resume_into(
        self,
        state: RunState,
        run_id: str,
        approvals: Mapping[str, Decision] | None,
        force: bool,
        options: RunOptions,
    ) -> AgentResult:
        if isinstance(state.setup_error, PromptError):
            state.setup_error = None  # the stored run has its system prompt already
        durable = None
        try:
            durable = self._durable_for(options)
        except TypeError as exc:
            state.setup_error = state.setup_error or InvalidOptionsError(str(exc))
        if durable is None:
            state.setup_error = state.setup_error or InvalidOptionsError(
                "resume needs the run's store: durable=raygent.Durable(store=...) on the "
                "agent or the call"
            )
            durable = default_durable()
        backend = state.config.backend

        def saver_for(
            session_id: str, user_id: str | None, metadata: Mapping[str, str], run: str
        ) -> RunSaver:
            if self.memory is None:
                self.memory = default_memory()
            scope = scope_of(session_id, user_id, metadata)
            return RunSaver(self.memory, scope, backend.sessions, run)

        return await resume_state(
            state,
            durable,
            run_id,
            approvals=approvals,
            force=force,
            user_id=options.get("user_id"),
            metadata=options.get("metadata"),
            saver_for=saver_for,
        )


def _resume_options(options: RunOptions) -> RunOptions:
    kept = {k: v for k, v in options.items() if k not in _STORED_OPTIONS}
    return kept  # type: ignore[return-value]

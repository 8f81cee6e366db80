"""What workflows and supervisors share: the executable surface (`execute`, `execute_sync`,
`stream`, `as_tool`, `on`) around one body that runs a `FlowRun`, and their durable runs.

Durable flows: `durable=raygent.Durable(store)` on the flow (or per call) writes its state
as it settles (a workflow after every step, a supervisor after every iteration), so
`flow.resume(run_id)` goes on in another process after a crash without running what
settled (or the runs it made) again. What each flow writes and how it goes on is its own
(`durable_signature`, `continue_from`); starting, ending, resuming and the store's
questions are here (the record itself: `_durable`, on `raygent.durable.journal`).

The flows' own runs are not durable apart: a step or an iteration that had not settled
when the process died runs again from its start.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ValidationError

from .._sync import run_sync
from ..durable.journal import is_stored as stored_under
from ..durable.journal import load
from ..durable.options import Durable
from ..durable.scope import run_scope
from ..errors import AbortedError, InvalidOptionsError, RaygentError, StepFailedError
from ..models._names import check_run_options
from ..observers import Observe
from ..observers.events import Event, EventHandler, Handlers, handler_list
from ..observers.report import FlowReport, FlowResult, FlowResume
from ..tools import Tool
from ..usage import Usage
from ._durable import FlowEntry, FlowHeader, FlowJournal, FlowOutcome
from ._run import FlowRun, now
from ._values import as_text, validated

__all__ = [
    "Flow",
    "FlowStream",
    "child_input",
    "completed",
    "durable_for",
    "record_resume",
    "start_journal",
]


class Flow(ABC):
    """Base of `Workflow` and `Supervisor`. A subclass gives `kind` and `_body`."""

    kind: ClassVar[Literal["workflow", "supervisor"]]
    # What `execute` takes (see its docstring): `raygent.batch` refuses any other run
    # option before anything runs (`raygent.executable.TakesRunOptions`).
    run_option_names: frozenset[str] = frozenset(
        {"context", "deps", "signal", "on", "observe", "run_id", "parent", "durable", "scope"}
    )

    def __init__(
        self,
        *,
        name: str,
        version: str | None,
        input_model: type[BaseModel] | None,
        output_model: type[BaseModel] | None,
        description: str | None,
        on: Handlers | None,
        observe: Observe,
        durable: Durable | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"a {self.kind} needs a name, not {name!r}")
        for label, model in (("input", input_model), ("output", output_model)):
            if model is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
                raise TypeError(f"{label}= takes a pydantic model class, not {model!r}")
        if durable is not None and not isinstance(durable, Durable):
            raise TypeError("durable= takes raygent.Durable(store=...)")
        self.name = name
        self.durable = durable
        self.version = version
        self.input_model = input_model
        self.output_model = output_model
        self.description = description
        self.observe = observe
        self._handlers = handler_list(on)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    def on(self, event: str, handler: EventHandler) -> Callable[[], None]:
        """Subscribe to an event ("*" for all, nested runs' included) on every run."""
        pair = (event, handler)
        self._handlers.append(pair)
        return lambda: self._handlers.remove(pair) if pair in self._handlers else None

    async def execute(self, input: Any, **options: Any) -> FlowResult:
        """Run once. Never raises: failures come back typed on `result.error` (with what
        the steps produced before in `result.outputs`). Options: `context=` (a dict the
        steps see, never stored), `deps=`, `signal=`, `on=`, `observe=`, `run_id=`, and
        `parent=` when run inside another run. A batch's `budget=` reaches it in its
        scope (`seams.attempt.RunScope`): every run it starts inherits that scope, so
        every agent below it is held to the job's budget."""
        return await self._run(self._new_run(options, None), input)

    def execute_sync(self, input: Any, **options: Any) -> FlowResult:
        """`execute` from synchronous code, with or without a running loop."""
        return run_sync(lambda: self.execute(input, **options))

    def stream(self, input: Any, **options: Any) -> FlowStream:
        """Run once, yielding typed events (the flow's and every nested run's, each with
        its own run_id and the root_run_id); `await stream.result` gives the result."""
        return FlowStream(self, input, options)

    # -- durable runs (see below) ---------------------------------------------------------

    async def resume(
        self, run_id: str, *, force: bool = False, approvals: Any = None, **options: Any
    ) -> FlowResult:
        """Go on with a durable run from what it last settled; never raises. What settled
        is not run again (its outputs come back from the store: validated by a step's
        `output=` model, else their JSON values), what had not settled runs again, usage
        counts each settled run once. A completed run gives its result again
        (`report.resumes[-1].already_resolved`). A flow whose signature changed (its
        steps or intents, `version`, bounds, input/output models) gets a failed result
        with `DriftError` and nothing changes; `force=True` goes on."""
        run = self._new_run({**options, "run_id": run_id}, None)
        return await self._run(run, None, resumer(self, run_id, force, approvals, options))

    def stream_resume(self, run_id: str, *, force: bool = False, **options: Any) -> FlowStream:
        """`resume`, yielding the events as `stream` does."""
        body = resumer(self, run_id, force, None, options)
        return FlowStream(self, None, {**options, "run_id": run_id}, body)

    async def is_stored(self, run_id: str, **options: Any) -> bool:
        """Whether a durable run is stored under `run_id` on this flow's store."""
        return await stored_run(self, run_id, **options)

    async def abandon(self, run_id: str, reason: str = "abandoned", **options: Any) -> None:
        """End a stored run as cancelled; a later resume gives that result."""
        await abandon_run(self, run_id, reason, **options)

    def durable_signature(self) -> dict[str, Any]:
        """What a resume must find unchanged (a durable flow gives it)."""
        raise InvalidOptionsError(f"a {self.kind} cannot be durable")

    async def continue_from(
        self,
        run: FlowRun,
        header: FlowHeader,
        entries: list[FlowEntry],
        journal: FlowJournal,
        drift: list[str],
        force: bool,
    ) -> FlowResult:
        """Go on from the settled `entries` (a durable flow gives it)."""
        raise InvalidOptionsError(f"a {self.kind} cannot be durable")

    def as_tool(self, name: str | None = None, description: str | None = None) -> Tool[..., Any]:
        """This flow as a tool (what `tools=[flow]` does): its input model is the tool's
        arguments, else one string `input`."""
        from ._as_tool import executable_tool

        return executable_tool(self, name=name, description=description)

    def agents(self) -> list[Any]:
        """Every agent a run may start (its steps', branches', intents', its router's),
        nested flows' included: what a job's dollar budget checks the pricing of."""
        found: list[Any] = []
        for child in self._children():
            if isinstance(child, Flow):
                found.extend(child.agents())
            elif child is not None and hasattr(child, "model"):
                found.append(child)
        return found

    def _children(self) -> list[Any]:
        """The executables a run may start (agents, routers' agents, flows)."""
        return []

    # -- one run -------------------------------------------------------------------------

    def _new_run(self, options: dict[str, Any], sink: Callable[[Event], None] | None) -> FlowRun:
        return FlowRun(
            kind=self.kind,
            name=self.name,
            version=self.version,
            options=options,
            handlers=list(self._handlers),
            observe=self.observe,
            sink=sink,
        )

    async def _run(
        self,
        run: FlowRun,
        input: Any,
        body: Callable[[FlowRun], Awaitable[FlowResult]] | None = None,
    ) -> FlowResult:
        """Run `_body` on the validated input (or `body`: a resume, whose input is the
        stored one), recording any failure on the result."""
        await run.start()
        try:
            # A misspelt option would be ignored: the run fails before any step.
            subject = f"a run of {self.kind} {self.name!r}"
            check_run_options(run.options, self.run_option_names, subject=subject)
            if body is not None:
                return await body(run)
            value = self._validated_input(input)
            return await self._body(run, value)
        except asyncio.CancelledError:
            await run.finish(
                data=None,
                text="",
                outputs=run.outputs,
                error=AbortedError(f"the {self.kind} was cancelled"),
                status="cancelled",
            )
            raise
        except Exception as exc:
            return await run.finish(data=None, text="", outputs=run.outputs, error=_as_error(exc))

    def _validated_input(self, input: Any) -> Any:
        model = self.input_model
        if model is None or isinstance(input, model):
            return input
        try:
            if isinstance(input, (str, bytes)):
                return model.model_validate_json(input)
            return model.model_validate(input)
        except ValidationError as exc:
            raise InvalidOptionsError(
                f"invalid input for {self.kind} {self.name!r}: {exc.error_count()} issue(s)",
                issues=exc.errors(include_url=False, include_context=False),
            ) from None

    @abstractmethod
    async def _body(self, run: FlowRun, input: Any) -> FlowResult:
        """Run the steps and end with `run.finish(...)`; may raise (the base records it)."""


def _as_error(exc: Exception) -> RaygentError:
    if isinstance(exc, RaygentError):
        return exc
    error = StepFailedError(f"{type(exc).__name__}: {exc}", step=None)
    error.__cause__ = exc
    return error


class FlowStream:
    """Async iterator of a flow run's events, nested runs' included; `await .result`
    gives the FlowResult."""

    def __init__(
        self,
        flow: Flow,
        input: Any,
        options: dict[str, Any],
        body: Callable[[FlowRun], Awaitable[FlowResult]] | None = None,
    ) -> None:
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self._run = flow._new_run(options, self._queue.put_nowait)
        self._ended = False
        self._task = asyncio.ensure_future(flow._run(self._run, input, body))
        self._task.add_done_callback(lambda _: self._queue.put_nowait(None))

    def __aiter__(self) -> FlowStream:
        return self

    async def __anext__(self) -> Event:
        if self._ended:
            raise StopAsyncIteration
        event = await self._queue.get()
        if event is None:
            self._ended = True
            raise StopAsyncIteration
        return event

    async def aclose(self) -> None:
        """Stop listening: the run is cancelled, not left behind."""
        if not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    @property
    def result(self) -> asyncio.Future[FlowResult]:
        return self._task

    def abort(self, reason: str | None = None) -> None:
        """Abort the run (its steps' runs end cancelled)."""
        self._run.abort.abort(reason)


def child_input(executable: Any, value: Any, *, given: bool) -> Any:
    """What a child run gets: `value` as is for a flow (a workflow or supervisor: its
    steps read `state.input`, its `input=` model validates it). An agent takes text or
    messages: a model becomes its JSON; the previous step's output (not `given` by an
    `input=` function, which may give messages) becomes text, a dict or list as JSON."""
    if isinstance(value, str) or _is_flow(executable):
        return value
    if given and not isinstance(value, BaseModel):
        return value
    return as_text(value)


def _is_flow(executable: Any) -> bool:
    return isinstance(executable, Flow) or getattr(executable, "input_model", None) is not None


# -- durable runs ------------------------------------------------------------------


def durable_for(flow: Flow, run: FlowRun, options: dict[str, Any]) -> Durable | None:
    if run.info.parent_run_id is not None:
        return None  # a nested flow is a step of its parent's: it re-runs whole
    durable = options.get("durable", flow.durable)
    if durable is not None and not isinstance(durable, Durable):
        raise TypeError("durable= takes raygent.Durable(store=...)")
    return durable


async def start_journal(
    flow: Flow, run: FlowRun, input: Any, options: dict[str, Any]
) -> FlowJournal | None:
    durable = durable_for(flow, run, options)
    if durable is None:
        return None
    journal = FlowJournal(durable, run_scope(run.info.run_id, options))
    await journal.start(
        FlowHeader(
            kind=flow.kind,
            name=flow.name,
            signature=flow.durable_signature(),
            run_id=run.info.run_id,
            root_run_id=run.info.root_run_id,
            started_at=run.report.started_at,
            input=input,
        )
    )
    return journal


async def completed(flow: Flow, journal: FlowJournal, result: FlowResult) -> None:
    await journal.finish(
        FlowOutcome(
            report=result.report,
            data=result.data,
            text=result.text,
            outputs=result.outputs,
            usage=result.usage,
        )
    )


def resumer(
    flow: Flow, run_id: str, force: bool, approvals: Any, options: dict[str, Any]
) -> Callable[[FlowRun], Awaitable[FlowResult]]:
    async def body(run: FlowRun) -> FlowResult:
        if approvals:
            raise InvalidOptionsError(f"a {flow.kind}'s resume takes no approvals")
        durable = durable_for(flow, run, options)
        if durable is None:
            raise InvalidOptionsError(
                f"{flow.kind} {flow.name!r} is not durable: give durable=raygent.Durable(...)"
            )
        current = flow.durable_signature()
        restored = await FlowJournal.restore(
            durable, run_scope(run_id, options), current, force=force
        )
        stored = restored.header.signature
        drift = sorted(k for k in set(stored) | set(current) if stored.get(k) != current.get(k))
        if restored.outcome is not None:
            return await resolved(flow, run, restored.outcome, drift, force)
        return await flow.continue_from(
            run, restored.header, restored.entries, restored.journal, drift, force
        )

    return body


async def resolved(
    flow: Flow, run: FlowRun, outcome: FlowOutcome, drift: list[str], force: bool
) -> FlowResult:
    report = outcome.report.model_copy(deep=True)
    report.resumes.append(
        FlowResume(
            at=now(),
            settled_steps=len(report.steps),
            forced=force and bool(drift),
            drift=drift,
            already_resolved=True,
        )
    )
    run.report, run.usage = report, outcome.usage
    error: RaygentError | None = None
    if report.status != "completed":
        message = str((report.error or {}).get("message") or report.status)
        error = AbortedError(message) if report.status == "cancelled" else RaygentError(message)
    data = outcome.data
    if flow.output_model is not None and data is not None and error is None:
        data = validated(data, flow.output_model, None)
    return await run.finish(
        data=data, text=outcome.text, outputs=outcome.outputs, error=error, status=report.status
    )


async def stored_run(flow: Flow, run_id: str, **options: Any) -> bool:
    """Whether a durable run is stored under `run_id` (on this flow's store)."""
    durable = options.get("durable", flow.durable)
    if durable is None:
        return False
    return await stored_under(durable, run_scope(run_id, options))


async def abandon_run(flow: Flow, run_id: str, reason: str = "abandoned", **options: Any) -> None:
    """End a stored run as cancelled: a later resume gives that result."""
    durable = options.get("durable", flow.durable)
    if durable is None:
        raise InvalidOptionsError(f"{flow.kind} {flow.name!r} is not durable")
    scope = run_scope(run_id, options)
    record = await load(durable, scope)
    if record is None or record.outcome is not None:
        return
    journal = await FlowJournal.claim(durable, scope, record)
    entries = [FlowEntry.model_validate_json(e) for e in record.entries]
    header = FlowHeader.model_validate_json(record.header)

    ended = now()
    report = FlowReport(
        kind=flow.kind,
        run_id=header.run_id,
        root_run_id=header.root_run_id,
        name=flow.name,
        version=flow.version,
        status="cancelled",
        started_at=header.started_at,
        ended_at=ended,
        duration=(ended - header.started_at).total_seconds(),
        steps=[e.step for e in entries],
        error={"type": "AbortedError", "code": "ABORTED", "message": reason},
    )
    usage = entries[-1].usage if entries else Usage()
    await journal.finish(FlowOutcome(report=report, usage=usage))


def record_resume(run: FlowRun, from_step: str | None, drift: list[str], force: bool) -> None:
    """Say on the report that the run goes on from `from_step` after what it restored."""
    run.report.resumes.append(
        FlowResume(
            at=now(),
            settled_steps=len(run.report.steps),
            from_step=from_step,
            forced=force and bool(drift),
            drift=drift,
        )
    )
    if run.report.resumed_from_step is None:
        run.report.resumed_from_step = from_step

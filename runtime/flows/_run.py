"""One workflow or supervisor run: its ids, events, report, usage, and the child runs it
makes. Shared by `Workflow` and `Supervisor` so both report, stream, price and observe
the same way an agent does."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any, Literal

from ..abort import AbortController, AbortSignal
from ..errors import AbortedError, RaygentError, error_dict
from ..observers import Observe
from ..observers.delivery import deliver, observers_for
from ..observers.events import (
    Dispatcher,
    Event,
    EventHandler,
    FlowCompleted,
    FlowErrored,
    FlowStarting,
    StepCompleted,
    StepStarted,
    handler_list,
)
from ..observers.report import FlowReport, FlowResult, RunStatus, StepReport, StepRun, StepStatus
from ..run_context import RunInfo
from ..seams.attempt import inherited
from ..usage import Usage

__all__ = ["FlowRun", "now"]


def now() -> datetime:
    return datetime.now(timezone.utc)


class FlowRun:
    """The state of one flow run while it goes. Made by the flow's `execute`/`stream`;
    `finish` ends it (events, observers) and gives the result."""

    def __init__(
        self,
        *,
        kind: Literal["workflow", "supervisor"],
        name: str,
        version: str | None,
        options: Mapping[str, Any],
        handlers: list[tuple[str, EventHandler]],
        observe: Observe,
        sink: Callable[[Event], None] | None = None,
    ) -> None:
        parent: RunInfo | None = options.get("parent")
        run_id = str(options.get("run_id") or uuid.uuid4().hex)
        self.info = RunInfo(
            run_id=run_id,
            root_run_id=parent.root_run_id if parent else run_id,
            parent_run_id=parent.run_id if parent else None,
            session_id=parent.session_id if parent else None,
            agent_name=name,
            deps=options.get("deps", parent.deps if parent else None),
        )
        self.options = options
        inherited_scope = inherited(options)
        self.scope = inherited_scope.child(inherited_scope.ledgers)
        self.context: dict[str, Any] = dict(options.get("context") or {})
        self.events = Dispatcher([handlers, handler_list(options.get("on"))], sink)
        # Nested runs' events reach this run's handlers and stream only when someone
        # listens (a nested run builds no event nobody wants).
        self._forwarding = self.events.wants("*") or sink is not None
        self._streaming = sink is not None
        self.abort = AbortController()
        caller: AbortSignal | None = options.get("signal")
        # Who can abort this run: the caller's signal, or a stream's `abort()`. When no
        # one can, its children get no signal (watching one costs every await of theirs).
        self._abortable = caller is not None or sink is not None
        self._unlink: Callable[[], None] | None = None
        if caller is not None:
            if caller.aborted:
                self.abort.abort(caller.reason)
            else:
                self._unlink = caller.add_callback(lambda: self.abort.abort(caller.reason))
        # A nested flow is delivered inside its root's tree, not on its own.
        self.observers = () if parent else observers_for(observe, options.get("observe"))
        self.usage = Usage()
        # What the steps produced so far: a failed or cancelled run's result keeps it.
        self.outputs: dict[str, Any] = {}
        self._clock = time.perf_counter()
        # Built without validation, every field given: each value is one this run made.
        self.report = FlowReport.model_construct(
            kind=kind,
            run_id=self.info.run_id,
            root_run_id=self.info.root_run_id,
            parent_run_id=self.info.parent_run_id,
            session_id=self.info.session_id,
            name=name,
            version=version,
            status="completed",
            started_at=now(),
            ended_at=None,
            duration=None,
            steps=[],
            error=None,
            handler_errors=[],
            resumes=[],
            resumed_from_step=None,
        )
        # What a child run is given as its parent.
        self.child_info = self.info

    @property
    def signal(self) -> AbortSignal:
        return self.abort.signal

    async def start(self) -> None:
        if not self.events.wants(FlowStarting.type):
            return  # an event nobody listens to is not built
        await self.events.emit(
            FlowStarting(
                run_id=self.info.run_id,
                root_run_id=self.info.root_run_id,
                name=self.report.name,
                kind=self.report.kind,
                parent_run_id=self.info.parent_run_id,
            )
        )

    # -- steps -------------------------------------------------------------------------

    async def open_step(
        self,
        name: str,
        kind: Literal["run", "agent", "parallel", "route", "intent"],
        *,
        iteration: int | None = None,
    ) -> StepReport:
        step = StepReport.model_construct(
            name=name,
            kind=kind,
            status="completed",
            iteration=iteration,
            attempts=0,
            started_at=now(),
            ended_at=None,
            duration=None,
            error=None,
            runs=[],
        )
        self.report.steps.append(step)
        return step

    async def attempt(self, step: StepReport) -> int:
        """Count one more attempt of `step` and say so (`flow.step.started`)."""
        step.attempts += 1
        if self.events.wants(StepStarted.type):
            await self.events.emit(
                StepStarted(
                    run_id=self.info.run_id,
                    root_run_id=self.info.root_run_id,
                    step=step.name,
                    kind=step.kind,
                    attempt=step.attempts,
                    iteration=step.iteration,
                )
            )
        return step.attempts

    async def close_step(
        self, step: StepReport, status: StepStatus, error: BaseException | None = None
    ) -> None:
        step.status = status
        step.ended_at = now()
        step.duration = (step.ended_at - step.started_at).total_seconds()
        step.error = None if error is None else error_dict(error)
        if self.events.wants(StepCompleted.type):
            await self.events.emit(
                StepCompleted(
                    run_id=self.info.run_id,
                    root_run_id=self.info.root_run_id,
                    step=step.name,
                    status=status,
                    duration=step.duration,
                    iteration=step.iteration,
                    error=step.error,
                )
            )

    async def child(
        self,
        executable: Any,
        input: Any,
        step: StepReport,
        *,
        branch: str | None = None,
        options: Mapping[str, Any] | None = None,
        signal: AbortSignal | None = None,
    ) -> Any:
        """Run `executable` as a child of this run: its report hangs under `step`, its
        usage adds to this run's (every attempt's), its events reach this run's
        listeners. `signal` (one that follows this run's, e.g. to stop a parallel step's
        other branches) replaces the run's own. Returns the child's result; never raises
        but CancelledError."""
        run_options: dict[str, Any] = dict(options or {})
        run_options["parent"] = self.child_info
        # Held to what holds this run (a batch job's budget, a calling run's budgets).
        run_options["scope"] = self.scope
        run_options["signal"] = signal or (self.signal if self._abortable else None)
        stream = getattr(executable, "stream", None)
        if self._streaming and callable(stream):
            # A streamed flow streams its children: their deltas (text, tool arguments)
            # reach the flow's stream too, not only their lifecycle events.
            events = stream(input, **run_options)
            async for event in events:
                await self.events.emit(event)
            result = await events.result
        else:
            if self._forwarding:
                run_options["on"] = {"*": self.events.emit}
            result = await executable.execute(input, **run_options)
        report = getattr(result, "report", None)
        if report is not None:
            run = StepRun.model_construct(branch=branch, attempt=step.attempts, report=report)
            step.runs.append(run)
        usage = getattr(result, "usage", None)
        if isinstance(usage, Usage):
            self.usage = self.usage + usage
        return result

    def check_abort(self) -> None:
        """Raise AbortedError if the run was aborted (between steps)."""
        if self.signal.aborted:
            raise AbortedError(f"the {self.report.kind} was aborted: {self.signal.reason}")

    # -- the end -----------------------------------------------------------------------

    async def finish(
        self,
        *,
        data: Any,
        text: str,
        outputs: dict[str, Any],
        error: RaygentError | None,
        status: RunStatus | None = None,
    ) -> FlowResult:
        """End the run: its report closed, `flow.completed` or `flow.error` emitted, the
        observers handed the report (a root run only)."""
        if self._unlink is not None:
            self._unlink()
            self._unlink = None
        report = self.report
        if status is None:
            status = "completed" if error is None else _status_of(error)
        report.status = status
        report.error = None if error is None else error.to_dict()
        report.ended_at = now()
        report.duration = time.perf_counter() - self._clock
        result = FlowResult(
            data=data, text=text, report=report, usage=self.usage, error=error, outputs=outputs
        )
        run_id, root_run_id = self.info.run_id, self.info.root_run_id
        if error is None:
            if self.events.wants(FlowCompleted.type):
                await self.events.emit(
                    FlowCompleted(run_id=run_id, root_run_id=root_run_id, result=result)
                )
        elif self.events.wants(FlowErrored.type):
            await self.events.emit(
                FlowErrored(
                    run_id=run_id, root_run_id=root_run_id, error=report.error or {}, result=result
                )
            )
        if self.events.handler_errors:
            report.handler_errors = list(self.events.handler_errors)
        if self.observers:
            await deliver(report, self.observers)
        return result


def _status_of(error: RaygentError) -> RunStatus:
    if error.category == "cancelled":
        return "cancelled"
    if error.category == "approval":
        return "awaiting_approval"
    return "failed"

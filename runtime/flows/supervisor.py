"""`raygent.supervisor`: one input routed across specialists (intents), iteration after
iteration, until the route says END.

Each iteration has a routing step (kind "route": `route(state)`, or a router agent's run
under it) and the intents it chose (kind "intent", one step each, run concurrently when
several were chosen), all with `iteration` set. Then `evaluate(state, outputs)` may end
it early. See `supervisor()` for what each part returns.

A durable supervisor writes an entry per settled iteration (its routing and intent steps,
its outputs, the errors `on_failure` let go by); a resume goes on from the entries: the
settled iterations are history, the next one is routed afresh (see `_flow` for the
rest). An iteration that had not settled runs again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel

from ..durable.options import Durable
from ..errors import (
    AbortedError,
    BudgetExceededError,
    MaxIterationsError,
    RaygentError,
    StepFailedError,
    error_dict,
)
from ..observers import Observe
from ..observers.events import Handlers
from ..observers.report import FlowResult, StepReport
from ._durable import FlowEntry, FlowHeader, FlowJournal
from ._flow import Flow, _as_error, child_input, completed, record_resume, start_journal
from ._markers import END, _End
from ._run import FlowRun
from ._supervisor_state import (
    END_NAME,
    Iteration,
    SupervisorState,
    as_text,
    maybe_await,
    read_decision,
)
from ._values import validated
from .router import Router, Voting

__all__ = ["Supervisor", "supervisor"]

Route = Callable[[SupervisorState], Any]
Evaluate = Callable[[SupervisorState, dict[str, Any]], Any]
IntentInput = Callable[[SupervisorState, str], Any]
OnFailure = Callable[[SupervisorState, str, BaseException], Any]


class Supervisor(Flow):
    """Build with `raygent.supervisor(...)`."""

    kind: ClassVar[Literal["workflow", "supervisor"]] = "supervisor"

    def __init__(
        self,
        *,
        name: str,
        intents: Mapping[str, Any],
        route: Route | None,
        router: Router | Route | None,
        evaluate: Evaluate | Voting | None,
        on_failure: OnFailure | None,
        intent_input: IntentInput | None,
        max_iterations: int,
        max_fan_out: int,
        input_model: type[BaseModel] | None,
        output_model: type[BaseModel] | None,
        version: str | None,
        description: str | None,
        on: Handlers | None,
        observe: Observe,
        durable: Durable | None = None,
    ) -> None:
        super().__init__(
            name=name,
            version=version,
            input_model=input_model,
            output_model=output_model,
            description=description,
            on=on,
            observe=observe,
            durable=durable,
        )
        self.intents = _checked_intents(intents)
        if (route is None) == (router is None):
            raise TypeError("a supervisor takes route= (a function) or router= (an agent)")
        if isinstance(router, Router):
            extra = sorted(set(router.intents) - set(self.intents))
            if extra:
                raise ValueError(f"the router names intents the supervisor lacks: {extra}")
            self.router: Router | None = router
            self.route: Route | None = None
        else:
            chosen = route if route is not None else router
            if not callable(chosen):
                raise TypeError(f"route= takes a function of the state, not {chosen!r}")
            self.router, self.route = None, chosen
        if isinstance(evaluate, Voting):  # `evaluate=raygent.vote`: the ready evaluate
            evaluate = evaluate.evaluate
        hooks = (("evaluate", evaluate), ("on_failure", on_failure), ("intent_input", intent_input))
        for label, value in hooks:
            if value is not None and not callable(value):
                raise TypeError(f"{label}= takes a function, not {value!r}")
        self.evaluate = evaluate
        self.on_failure = on_failure
        self.intent_input = intent_input
        for label, bound in (("max_iterations", max_iterations), ("max_fan_out", max_fan_out)):
            if not isinstance(bound, int) or isinstance(bound, bool) or bound < 1:
                raise ValueError(f"{label} must be an int >= 1, not {bound!r}")
        self.max_iterations = max_iterations
        self.max_fan_out = max_fan_out

    def __repr__(self) -> str:
        return f"Supervisor(name={self.name!r}, intents={list(self.intents)})"

    def _children(self) -> list[Any]:
        routing = [] if self.router is None else [self.router.agent]
        return [*routing, *self.intents.values()]

    async def _body(self, run: FlowRun, input: Any) -> FlowResult:
        state = SupervisorState(input=input, context=run.context, run_id=run.info.run_id)
        journal = await start_journal(self, run, input, dict(run.options))
        return await self._conclude(run, state, journal)

    async def _conclude(
        self, run: FlowRun, state: SupervisorState, journal: FlowJournal | None
    ) -> FlowResult:
        """Iterate from `state.iteration` to the end, and finish the run."""
        try:
            last = await self._iterate(run, state, journal)
            data = self._final(last)
        except Exception as exc:  # a RaygentError, or a route or evaluate that raised
            failure = _as_error(exc)
            return await run.finish(data=None, text="", outputs=dict(state.outputs), error=failure)
        result = await run.finish(
            data=data,
            text="" if last is None else as_text(_last_output(last)),
            outputs=dict(state.outputs),
            error=None,
        )
        if journal is not None:
            await completed(self, journal, result)
        return result

    async def _iterate(
        self, run: FlowRun, state: SupervisorState, journal: FlowJournal | None
    ) -> Iteration | None:
        """Route and run until END (or evaluate ends it); the last iteration run. A
        durable run writes each iteration that settled and goes on."""
        for index in range(state.iteration, self.max_iterations + 2):
            run.check_abort()
            state.iteration = index
            first_step = len(run.report.steps)
            chosen = await self._route(run, state)
            if isinstance(chosen, _End):
                return state.last
            if index > self.max_iterations:
                raise MaxIterationsError(
                    f"supervisor {self.name!r} ran {self.max_iterations} iteration(s) and "
                    f"its route still chose {chosen}",
                    max_iterations=self.max_iterations,
                    decision=chosen,
                )
            outputs, failures = await self._run_intents(run, state, chosen)
            done = Iteration(
                index=index,
                intents=tuple(chosen),
                outputs=outputs,
                errors={step.name: error for step, error in failures},
            )
            state.history.append(done)
            state.outputs.update(outputs)
            if failures and await self._failed(run, state, failures):
                return done
            if self.evaluate is not None:
                verdict = await maybe_await(self.evaluate(state, dict(outputs)))
                if verdict is END or verdict is True:
                    return done
            await write(journal, iteration_entry(run, first_step, done))
        raise AssertionError("unreachable: the loop ends by END or MaxIterationsError")

    # -- durable runs (see the end of this module) --------------------------------

    def durable_signature(self) -> dict[str, Any]:
        return signature_of(self)

    async def continue_from(
        self,
        run: FlowRun,
        header: FlowHeader,
        entries: list[FlowEntry],
        journal: FlowJournal,
        drift: list[str],
        force: bool,
    ) -> FlowResult:
        state = restored_state(self, run, header, entries, drift, force)
        return await self._conclude(run, state, journal)

    async def _route(self, run: FlowRun, state: SupervisorState) -> list[str] | _End:
        step = await run.open_step("route", "route", iteration=state.iteration)
        await run.attempt(step)
        try:
            chosen = read_decision(
                await self._decide(run, state, step), self.intents, self.max_fan_out
            )
        except asyncio.CancelledError:
            await run.close_step(step, "cancelled")
            raise
        except _RouterFailed as failed:  # the router's own error is the step's
            await run.close_step(step, _status(failed.cause), failed.cause)
            raise _failure(run, step, failed.cause, "the router") from None
        except RaygentError as error:  # a RoutingError, or one the route raised
            await run.close_step(step, _status(error), error)
            raise
        except Exception as exc:  # the route function raised
            await run.close_step(step, "failed", exc)
            raise _failure(run, step, exc, "route") from exc
        await run.close_step(step, "completed")
        return chosen

    async def _decide(self, run: FlowRun, state: SupervisorState, step: StepReport) -> Any:
        """What the route function returns, or the router agent (run under `step`) chose."""
        if self.router is None:
            assert self.route is not None
            return await maybe_await(self.route(state))
        result = await run.child(self.router, state, step)
        if not result.ok:
            raise _RouterFailed(result.error or StepFailedError("the router did not finish"))
        return self.router.decision(result.data)

    async def _run_intents(
        self, run: FlowRun, state: SupervisorState, chosen: list[str]
    ) -> tuple[dict[str, Any], list[tuple[StepReport, BaseException]]]:
        """Run the chosen intents at once: the outputs of those that completed, and the
        steps that failed with their errors (every intent runs to its end)."""
        # Steps are opened in the order routed, so the report reads in that order.
        steps = [await run.open_step(n, "intent", iteration=state.iteration) for n in chosen]
        if len(steps) == 1:  # in this task: a task of its own costs a run ~100 us here
            results = [await self._run_intent(run, state, steps[0])]
        else:
            results = await asyncio.gather(*(self._run_intent(run, state, s) for s in steps))
        outputs: dict[str, Any] = {}
        failures: list[tuple[StepReport, BaseException]] = []
        for step, (ok, out) in zip(steps, results, strict=True):
            if ok:
                outputs[step.name] = out
            else:
                failures.append((step, out))
        return outputs, failures

    async def _failed(
        self,
        run: FlowRun,
        state: SupervisorState,
        failures: list[tuple[StepReport, BaseException]],
    ) -> bool:
        """After intents failed: raise what fails the run, or (`on_failure` let it go
        on) whether it ends here."""
        if run.signal.aborted or self.on_failure is None:
            step, error = failures[0]
            raise _failure(run, step, error, f"intent {step.name!r}")
        for step, error in failures:
            if await maybe_await(self.on_failure(state, step.name, error)) is END:
                return True
        return False

    async def _run_intent(
        self, run: FlowRun, state: SupervisorState, step: StepReport
    ) -> tuple[bool, Any]:
        """(True, output) or (False, error); the step closed either way."""
        executable = self.intents[step.name]
        await run.attempt(step)
        try:
            value = (
                state.input
                if self.intent_input is None
                else await maybe_await(self.intent_input(state, step.name))
            )
            given = child_input(executable, value, given=self.intent_input is not None)
            result = await run.child(executable, given, step, branch=step.name)
        except asyncio.CancelledError:
            await run.close_step(step, "cancelled")
            raise
        except Exception as exc:
            await run.close_step(step, "failed", exc)
            return False, exc
        error = getattr(result, "error", None)
        if error is not None or getattr(result, "ok", True) is False:
            await run.close_step(step, _status(error), error)
            return False, error or StepFailedError(f"intent {step.name!r} did not complete")
        await run.close_step(step, "completed")
        data = getattr(result, "data", None)
        return True, data if data is not None else getattr(result, "text", result)

    def _final(self, last: Iteration | None) -> Any:
        """The result's data: the last iteration's output (one intent) or outputs by
        intent (several), validated into the output model when one is declared."""
        value = None if last is None else _last_output(last)
        if self.output_model is None:
            return value
        return validated(value, self.output_model, None)


class _RouterFailed(Exception):
    """The router agent's run did not complete (its error is `cause`)."""

    def __init__(self, cause: RaygentError) -> None:
        super().__init__(cause.message)
        self.cause = cause


def _checked_intents(intents: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(intents, Mapping) or not intents:
        raise TypeError("intents= takes a non-empty {name: executable} dict")
    for intent, executable in intents.items():
        if not isinstance(intent, str) or not intent or intent in (END_NAME, "route"):
            raise ValueError(f"not an intent name: {intent!r} (END and route are reserved)")
        if not callable(getattr(executable, "execute", None)):
            raise TypeError(f"intent {intent!r} is not an executable: {executable!r}")
    return dict(intents)


def _last_output(last: Iteration) -> Any:
    # A failed intent (its run let go on by `on_failure`) has no output.
    if len(last.intents) == 1:
        return last.outputs.get(last.intents[0])
    return {intent: last.outputs[intent] for intent in last.intents if intent in last.outputs}


def _status(error: BaseException | None) -> Literal["failed", "cancelled"]:
    category = getattr(error, "category", None)
    return "cancelled" if category == "cancelled" else "failed"


def _failure(
    run: FlowRun, step: StepReport, cause: BaseException | None, what: str
) -> RaygentError:
    """What a failed step fails the run with: its cause under a StepFailedError, or an
    AbortedError when the run was aborted (its steps' runs ended cancelled)."""
    if run.signal.aborted:
        return AbortedError(f"the supervisor was aborted: {run.signal.reason}")
    if isinstance(cause, BudgetExceededError):
        return cause  # the run ends BUDGET_EXCEEDED, as an agent's does
    message = "no error" if cause is None else getattr(cause, "message", None) or str(cause)
    details = {} if cause is None else error_dict(cause)
    error = StepFailedError(
        f"{what} failed at iteration {step.iteration}: {message}",
        # Retryable when its cause is: a batch (or a caller's) retry may try it again.
        retryable=getattr(cause, "retryable", False) is True,
        step=step.name,
        iteration=step.iteration,
        attempts=step.attempts,
        cause=details,
    )
    error.__cause__ = cause
    return error


def supervisor(
    *,
    name: str,
    intents: Mapping[str, Any],
    route: Route | None = None,
    router: Router | Route | None = None,
    evaluate: Evaluate | Voting | None = None,
    on_failure: OnFailure | None = None,
    intent_input: IntentInput | None = None,
    max_iterations: int = 10,
    max_fan_out: int = 10,
    input: type[BaseModel] | None = None,
    output: type[BaseModel] | None = None,
    version: str | None = None,
    description: str | None = None,
    on: Handlers | None = None,
    observe: Observe = None,
    durable: Durable | None = None,
) -> Supervisor:
    """A supervisor: each iteration routes the input to one intent or several at once
    (run concurrently), until the route says END.

    - `intents`: `{name: executable}` (agents, workflows, supervisors, any executable;
      `raygent.fan_out(executable, n)` makes n of one).
    - `route(state)` (sync or async) returns an intent's name, a list of names (a
      fan-out, at most `max_fan_out`), or `raygent.END` (or "END"); or `router=` a
      `raygent.router(...)` agent chooses (its run under each routing step; its usage
      counted). `router=` also takes a route function (e.g. `raygent.testing.mock_router`).
      An unknown intent, no decision, or too many intents at once: `RoutingError`.
    - `evaluate(state, outputs)` (sync or async), after each iteration with that
      iteration's outputs by intent: `raygent.END` or `True` ends; anything else (None,
      False) routes again. `raygent.vote` (or `vote.evaluate`) ends once the outputs have
      a winner; `vote.evaluator(key=..., majority=True)` builds a stricter one.
    - Each intent gets the supervisor's input, or what `intent_input(state, intent)`
      returns. A flow gets it as is; an agent gets text (a model as its JSON; the
      supervisor's own input, when not a string, as JSON) or what `intent_input` gave.
    - At most `max_iterations` iterations run intents; a route that still chooses
      intents after them fails the run with `MaxIterationsError`.

    The result: `data` is the last iteration's output (an intent's result `data`, else
    its `text`; by intent name when several ran), validated into `output=` when declared
    (`FlowOutputError` otherwise); `outputs` holds the latest output of every intent that
    ran, kept when the run fails. An intent that fails fails the run (`StepFailedError`,
    the intent's error as `cause`; the other intents of its iteration run to their end),
    unless `on_failure(state, intent, error)` (sync or async) is given: it returns
    `raygent.END` to end the run there (completed, with what did complete), anything
    else to go on (evaluate, then route again; the error is on `state.last.errors`, and
    a router agent is shown it), or raises to fail the run. `state` is a
    `SupervisorState`.

    `durable=raygent.Durable(store)` (or per call) writes each iteration that settles;
    `resume(run_id)` goes on from the next one in any process (see `Flow.resume`).
    """
    return Supervisor(
        name=name,
        intents=intents,
        route=route,
        router=router,
        evaluate=evaluate,
        on_failure=on_failure,
        intent_input=intent_input,
        max_iterations=max_iterations,
        max_fan_out=max_fan_out,
        input_model=input,
        output_model=output,
        version=version,
        description=description,
        on=on,
        observe=observe,
        durable=durable,
    )


# -- durable runs ------------------------------------------------------------------


def signature_of(flow: Supervisor) -> dict[str, Any]:
    """What a resume must find unchanged (bump `version=` for a change of meaning)."""
    return {
        "kind": flow.kind,
        "name": flow.name,
        "version": flow.version,
        "intents": sorted(flow.intents),
        "routing": "route" if flow.router is None else "router",
        "max_iterations": flow.max_iterations,
        "max_fan_out": flow.max_fan_out,
        "input": None if flow.input_model is None else flow.input_model.__name__,
        "output": None if flow.output_model is None else flow.output_model.__name__,
    }


def iteration_entry(run: FlowRun, first_step: int, done: Iteration) -> FlowEntry:
    """The entry of a settled iteration whose steps start at `first_step`."""
    steps = run.report.steps[first_step:]
    return FlowEntry(
        step=steps[0],
        more_steps=steps[1:],
        output=done.outputs,
        position={
            "iteration": done.index,
            "intents": list(done.intents),
            "errors": {name: error_dict(error) for name, error in done.errors.items()},
        },
        usage=run.usage,
    )


def restored_state(
    flow: Supervisor,
    run: FlowRun,
    header: FlowHeader,
    entries: list[FlowEntry],
    drift: list[str],
    force: bool,
) -> SupervisorState:
    """The state after the settled iterations: their history, outputs, steps, usage."""
    input = flow._validated_input(header.input) if header.input is not None else None
    state = SupervisorState(input=input, context=run.context, run_id=run.info.run_id)
    for entry in entries:
        position = entry.position
        outputs = dict(entry.output or {})
        errors: dict[str, BaseException] = {
            name: RaygentError(str(info.get("message", "")), **_details(info))
            for name, info in dict(position.get("errors") or {}).items()
        }
        done = Iteration(
            index=int(position["iteration"]),
            intents=tuple(position.get("intents") or outputs),
            outputs=outputs,
            errors=errors,
        )
        state.history.append(done)
        state.outputs.update(outputs)
        run.report.steps.extend([entry.step, *entry.more_steps])
        run.usage = entry.usage
    state.iteration = (state.history[-1].index if state.history else 0) + 1
    run.outputs = state.outputs
    from_step = f"iteration {state.iteration}"
    record_resume(run, from_step, drift, force)
    return state


def _details(info: dict[str, Any]) -> dict[str, Any]:
    return {"code": info.get("code"), "type": info.get("type")}


async def write(journal: FlowJournal | None, entry: FlowEntry) -> None:
    if journal is not None:
        await journal.settled(entry)

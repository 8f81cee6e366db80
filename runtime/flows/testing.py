"""Test helpers for flows (re-exported by `raygent.testing`): `mock_router`, and pytest
style assertions whose failures show the report path that broke, e.g.
`supervisor 'desk' > iteration 2 > intent 'billing' > agent 'bot': failed (SERVER_ERROR ...)`.

Each assertion takes a result (`FlowResult`, or `AgentResult` where it makes sense) or
its report, and raises AssertionError.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from ..errors import RoutingError
from ..observers.report import (
    AgentReport,
    AgentResult,
    FlowReport,
    FlowResult,
    RunReport,
    StepReport,
    ToolCallReport,
)
from ._markers import END, _End
from ._supervisor_state import END_NAME, SupervisorState

__all__ = [
    "MockRouter",
    "assert_converges",
    "assert_output_shape",
    "assert_routes_to",
    "assert_step_passed",
    "failure_path",
    "mock_router",
]

Decision = str | Sequence[str] | _End
Exhausted = Literal["end", "raise", "repeat"]


class MockRouter:
    """Replays routing decisions, one per routing (build with `mock_router`). Give it to
    a supervisor as `route=` or `router=`. Every run replays them from the first (runs
    are told apart by their run id), so one supervisor can run several cases.
    `iterations` records the iteration of every routing it answered, every run's."""

    def __init__(self, decisions: Iterable[Decision], on_exhausted: Exhausted) -> None:
        self.decisions: list[Decision] = list(decisions)
        for decision in self.decisions:
            if not _is_decision(decision):
                raise TypeError(
                    f"a decision is an intent's name, a list of names or raygent.END, "
                    f"not {decision!r}"
                )
        if on_exhausted not in ("end", "raise", "repeat"):
            raise ValueError(f"on_exhausted is 'end', 'raise' or 'repeat', not {on_exhausted!r}")
        if on_exhausted == "repeat" and not self.decisions:
            raise ValueError("on_exhausted='repeat' needs at least one decision to repeat")
        self.on_exhausted = on_exhausted
        self.iterations: list[int] = []
        self._played: dict[str, int] = {}  # by run id: how many decisions it was given
        self._latest = ""

    def __repr__(self) -> str:
        return f"mock_router({self.decisions!r}, on_exhausted={self.on_exhausted!r})"

    @property
    def remaining(self) -> int:
        """Decisions the latest run has not been given yet."""
        return max(0, len(self.decisions) - self._played.get(self._latest, 0))

    def __call__(self, state: SupervisorState) -> Decision:
        self._latest = state.run_id
        played = self._played.get(state.run_id, 0)
        self._played[state.run_id] = played + 1
        self.iterations.append(state.iteration)
        if played < len(self.decisions):
            return _copied(self.decisions[played])
        if self.on_exhausted == "repeat":
            return _copied(self.decisions[-1])
        if self.on_exhausted == "end":
            return END
        raise RoutingError(
            f"mock_router has no decision left: routing {played + 1} after "
            f"{len(self.decisions)} decision(s)",
            decision=None,
            intents=[],
        )


def mock_router(decisions: Iterable[Decision], on_exhausted: Exhausted = "end") -> MockRouter:
    """A route that replays `decisions` (each an intent's name, a list of names for a
    fan-out, or `raygent.END`), one per routing, from the first in every run. After the
    last: "end" routes to END, "raise" fails the run with RoutingError, "repeat" repeats
    the last decision."""
    return MockRouter(decisions, on_exhausted)


def _is_decision(value: Any) -> bool:
    if value is END or isinstance(value, str):
        return True
    return isinstance(value, (list, tuple)) and all(isinstance(n, str) for n in value)


def _copied(decision: Decision) -> Decision:
    return list(decision) if isinstance(decision, (list, tuple)) else decision


# -- report paths ------------------------------------------------------------------------

Subject = FlowResult | AgentResult | FlowReport | AgentReport


def _report(subject: Subject) -> RunReport:
    if isinstance(subject, (FlowResult, AgentResult)):
        return subject.report
    if isinstance(subject, (FlowReport, AgentReport)):
        return subject
    raise TypeError(f"takes a FlowResult or AgentResult (or its report), not {subject!r}")


def _label(report: RunReport) -> str:
    kind = report.kind if isinstance(report, FlowReport) else "agent"
    return f"{kind} {report.name!r}"


def _step_label(flow: FlowReport, step: StepReport) -> str:
    if flow.kind == "supervisor":
        what = "route" if step.kind == "route" else f"intent {step.name!r}"
        return what if step.iteration is None else f"iteration {step.iteration} > {what}"
    label = f"step {step.name!r}"
    return label if step.attempts <= 1 else f"{label} (attempt {step.attempts})"


def _error_text(error: dict[str, Any] | None) -> str:
    if not error:
        return ""
    code = error.get("code") or error.get("type") or "error"
    message = str(error.get("message") or "")
    if len(message) > 200:
        message = message[:197] + "..."
    return f" ({code} {message})" if message else f" ({code})"


def _under_step(flow: FlowReport, step: StepReport) -> list[str]:
    """The path from `step` down to what failed in it (its last failed run, its own)."""
    path = [_step_label(flow, step)]
    failed = next((r for r in reversed(step.runs) if r.report.status != "completed"), None)
    if failed is None:
        return [*path[:-1], path[-1] + f": {step.status}{_error_text(step.error)}"]
    if failed.branch is not None and failed.branch != step.name:
        path.append(f"branch {failed.branch!r}")
    return path + _failed_path(failed.report)


def _failed_path(report: RunReport) -> list[str]:
    """The path from `report` to the deepest node that failed, its status and error
    on the last segment."""
    here = _label(report)
    if report.status == "completed":
        return [here + ": completed"]
    if isinstance(report, FlowReport):
        step = _failing_step(report)
        if step is not None:
            return [here, *_under_step(report, step)]
    else:
        for call in report.tool_calls:
            if call.child is not None and call.child.status != "completed":
                return [here, f"tool {call.name!r}", *_failed_path(call.child)]
    return [here + f": {report.status}{_error_text(report.error)}"]


def _failing_step(flow: FlowReport) -> StepReport | None:
    """The step the run failed at: the one its error names (a StepFailedError's step and
    iteration), else its last step when that failed (a routing error, an abort); None
    when the run failed on its own (max_iterations, its output)."""
    broken = [s for s in flow.steps if s.status in ("failed", "cancelled")]
    error = flow.error or {}
    named = [
        s
        for s in broken
        if s.name == error.get("step")
        and (error.get("iteration") is None or s.iteration == error.get("iteration"))
    ]
    if named:
        return named[-1]
    last = flow.steps[-1] if flow.steps else None
    return last if last is not None and last in broken else None


def failure_path(subject: Subject) -> str:
    """Where a run broke: `supervisor 'desk' > iteration 2 > intent 'billing' > agent
    'bot': failed (CODE message)`; for a run that completed, `<label>: completed`."""
    return " > ".join(_failed_path(_report(subject)))


# -- assertions --------------------------------------------------------------------------


def _routings(flow: FlowReport) -> list[tuple[int | None, list[str] | str]]:
    """Each routing of a supervisor: its iteration and the intents it ran, or what it
    ended with ("END", "failed (...)", or the decision max_iterations refused)."""
    out: list[tuple[int | None, list[str] | str]] = []
    routes = [s for s in flow.steps if s.kind == "route"]
    for route in routes:
        ran = [s.name for s in flow.steps if s.kind == "intent" and s.iteration == route.iteration]
        if ran:
            out.append((route.iteration, ran))
        elif route.status != "completed":
            out.append((route.iteration, f"{route.status}{_error_text(route.error)}"))
        elif route is routes[-1] and (flow.error or {}).get("code") == "SUPERVISOR_MAX_ITERATIONS":
            out.append((route.iteration, f"{(flow.error or {}).get('decision')} (not run)"))
        else:
            out.append((route.iteration, END_NAME))
    return out


def _shown_routings(routings: list[tuple[int | None, list[str] | str]]) -> str:
    return ", ".join(f"iteration {i} > {chosen}" for i, chosen in routings) or "no routing"


def _failed_suffix(report: RunReport) -> str:
    return "" if report.status == "completed" else f"; it broke at {failure_path(report)}"


def assert_routes_to(subject: Subject, *intents: str, iteration: int | None = None) -> None:
    """The supervisor routed to every one of `intents` (at `iteration` when given). For
    a router agent's result (`raygent.router`), its decision named them."""
    if not intents:
        raise TypeError("assert_routes_to needs at least one intent")
    report = _report(subject)
    if isinstance(report, AgentReport):
        data = subject.data if isinstance(subject, AgentResult) else None
        chosen = getattr(data, "intents", None) or [getattr(data, "intent", None)]
        missing = [i for i in intents if i not in chosen]
        assert not missing, (
            f"{_label(report)} did not route to {missing}: it chose {chosen}"
            + _failed_suffix(report)
        )
        return
    if report.kind != "supervisor":
        raise TypeError(f"assert_routes_to takes a supervisor's result, not a {report.kind}'s")
    routings = _routings(report)
    routed = {
        name
        for i, chosen in routings
        if isinstance(chosen, list) and (iteration is None or i == iteration)
        for name in chosen
    }
    missing = [i for i in intents if i not in routed]
    where = "" if iteration is None else f" at iteration {iteration}"
    assert not missing, (
        f"{_label(report)} never routed to {', '.join(map(repr, missing))}{where}: "
        f"{_shown_routings(routings)}" + _failed_suffix(report)
    )


def assert_converges(subject: Subject, within: int | None = None) -> int:
    """The run completed: a supervisor routed to END (or its evaluate ended it) within
    `within` iterations; a workflow completed within `within` steps run. Returns how
    many it took."""
    report = _report(subject)
    if not isinstance(report, FlowReport):
        raise TypeError("assert_converges takes a supervisor's or workflow's result")
    assert report.status == "completed", f"did not converge: {failure_path(report)}"
    if report.kind == "supervisor":
        counted = {s.iteration for s in report.steps if s.kind == "intent"}
        took, unit = len(counted), "iteration(s)"
        detail = _shown_routings(_routings(report))
    else:
        ran = [s for s in report.steps if s.status != "skipped"]
        took, unit = len(ran), "step(s)"
        detail = " > ".join(f"step {s.name!r}" for s in ran)
    assert within is None or took <= within, (
        f"{_label(report)} converged in {took} {unit}, not within {within}: {detail}"
    )
    return took


def assert_step_passed(
    subject: Subject, name: str, iteration: int | None = None
) -> StepReport | ToolCallReport:
    """The step `name` (a workflow's step, a supervisor's intent, "route" for its
    routing; the last one, or the one of `iteration`) ran and completed. For an agent's
    result, its last call of the tool `name` succeeded. Returns the step's report (the
    tool call's for an agent)."""
    report = _report(subject)
    if isinstance(report, AgentReport):
        calls = [c for c in report.tool_calls if c.name == name]
        assert calls, (
            f"{_label(report)} never called tool {name!r}: it called "
            f"{[c.name for c in report.tool_calls]}" + _failed_suffix(report)
        )
        call = calls[-1]
        if call.error is not None or (call.child is not None and call.child.status != "completed"):
            path = [_label(report), f"tool {name!r}"]
            path += (
                _failed_path(call.child)
                if call.child is not None and call.child.status != "completed"
                else [f"failed{_error_text(call.error)}"]
            )
            raise AssertionError(" > ".join(path))
        return call
    steps = [
        s
        for s in report.steps
        if s.name == name and (iteration is None or s.iteration == iteration)
    ]
    where = "" if iteration is None else f" at iteration {iteration}"
    assert steps, (
        f"{_label(report)} has no step {name!r}{where}: it ran "
        f"{[s.name for s in report.steps]}" + _failed_suffix(report)
    )
    step = steps[-1]
    assert step.status == "completed", " > ".join([_label(report), *_under_step(report, step)])
    return step


def assert_output_shape(subject: FlowResult | AgentResult, model: type[BaseModel]) -> BaseModel:
    """The run completed and its `data` is a `model` (or validates as one: a dict, or
    JSON text). Returns it as a `model`."""
    if not isinstance(subject, (FlowResult, AgentResult)):
        raise TypeError(f"assert_output_shape takes a FlowResult or AgentResult, not {subject!r}")
    report = subject.report
    assert report.status == "completed", f"no output: {failure_path(report)}"
    data = subject.data
    if isinstance(data, model):
        return data
    try:
        if isinstance(data, (str, bytes)):
            return model.model_validate_json(data)
        return model.model_validate(data.model_dump() if isinstance(data, BaseModel) else data)
    except ValidationError as exc:
        issues = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}"
            for e in exc.errors(include_url=False)[:5]
        )
        raise AssertionError(
            f"{_label(report)}: data does not fit {model.__name__} "
            f"({exc.error_count()} issue(s): {issues}); data: {data!r}"
        ) from None

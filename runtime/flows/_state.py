"""`WorkflowState`: what a workflow's steps and hooks see while it runs."""

from __future__ import annotations

from typing import Any

__all__ = ["WorkflowState"]


class WorkflowState:
    """The state every hook gets (`run`, `input`, `skip`, `before`, `after`, `next`,
    `on_failure`).

    - `input`: the workflow's input, validated by its `input=` model when it has one;
    - `outputs`: each completed step's output by step name (a parallel step's is a dict
      keyed by branch name); a revisited step's is its latest;
    - `last`: the latest completed step's output (the workflow's input before any);
    - `context`: the caller's `context=` dict, shared by the steps, never stored or
      reported;
    - `step`, `attempt`, `visit`: the running step's name, its attempt (1 on the first
      try, counting retries) and how many times the run has entered it (a `Goto` loop);
    - `run_id`: the workflow run's id.
    """

    __slots__ = ("attempt", "context", "input", "last", "outputs", "run_id", "step", "visit")

    def __init__(self, *, input: Any, context: dict[str, Any], run_id: str) -> None:
        self.input = input
        self.outputs: dict[str, Any] = {}
        self.last: Any = input
        self.context = context
        self.step: str | None = None
        self.attempt = 0
        self.visit = 0
        self.run_id = run_id

    def __repr__(self) -> str:
        return (
            f"WorkflowState(step={self.step!r}, attempt={self.attempt}, "
            f"outputs={sorted(self.outputs)})"
        )

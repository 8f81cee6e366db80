"""Executables above the agent: workflows (fixed pipelines of steps) and supervisors (one
input routed across specialists), with `router`, `fan_out` and `vote` to build them.

_flow         `Flow`, `FlowStream`: what workflows and supervisors share, and their
              durable runs (start, finish, resume, abandon, is_stored)
_durable      what a durable flow's header, entries and outcome hold (`FlowJournal`, on
              the skeleton of `raygent.durable.journal`; the scope: `raygent.durable.scope`)
workflow      `Workflow`, `workflow`, and what its durable runs write and how they go on
supervisor    `Supervisor`, `supervisor`, likewise; _supervisor_state: its state
router        `router`, `fan_out`, `vote`
_run          `FlowRun`: one run's report, events and end; _step, _step_run: a step and
              running it; _values: the values between steps; _markers: `END`, `Goto`;
              _state: `WorkflowState`; _as_tool: a flow as a tool; testing: helpers

May import the base, models, seams, observers, durable (and the stores), and agents (the
routing agent, agents as steps); batch and agents never import flows (they take any
executable).
"""

from ..observers.report import FlowReport, FlowResult, StepReport, StepRun
from ._flow import Flow, FlowStream
from ._markers import END, Goto
from ._state import WorkflowState
from ._step import Step, step
from ._supervisor_state import Iteration, SupervisorState
from .router import Router, Tally, Vote, fan_out, router, vote
from .supervisor import Supervisor, supervisor
from .workflow import Workflow, workflow

__all__ = [
    "END",
    "Flow",
    "FlowReport",
    "FlowResult",
    "FlowStream",
    "Goto",
    "Iteration",
    "Router",
    "Step",
    "StepReport",
    "StepRun",
    "Supervisor",
    "SupervisorState",
    "Tally",
    "Vote",
    "Workflow",
    "WorkflowState",
    "fan_out",
    "router",
    "step",
    "supervisor",
    "vote",
    "workflow",
]

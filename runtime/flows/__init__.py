"""Executables above the agent: workflows (fixed pipelines of steps) and supervisors (one
input routed across specialists), with `router`, `fan_out` and `vote` to build them.

May import the base, models, observe, agents (the routing agent, agents as steps) and
batch (its `Retry`); batch and agents never import flows (they take any executable).
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

"""Executables above the agent: workflows (fixed pipelines of steps) and supervisors (one
input routed across specialists), with `router`, `fan_out` and `vote` to build them.

May import the base, models, observe, agents (the routing agent, agents as steps) and
batch (its `Retry`); batch and agents never import flows (they take any executable).
"""

from ..observe.report import FlowReport, FlowResult, StepReport, StepRun
from ._flow import Flow, FlowStream
from ._markers import END, Goto
from ._state import WorkflowState
from ._step import Step, step
from .workflow import Workflow, workflow

__all__ = [
    "END",
    "Flow",
    "FlowReport",
    "FlowResult",
    "FlowStream",
    "Goto",
    "Step",
    "StepReport",
    "StepRun",
    "Workflow",
    "WorkflowState",
    "step",
    "workflow",
]

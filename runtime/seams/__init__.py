"""The seams between the core and where work runs, and the registry that picks a backend.

contract      the protocols a backend implements (`Backend`, `ModelAccess`,
              `ToolExecution`, `BatchExecution`, `BatchPool`, `PoolPlan`,
              `ProviderBatchPool`) and the plug-in a backend package registers
              (`BackendPlugin`)
batch         the shapes a batch seam carries: `Job`, `Outcome`, `BatchItem`, `Feed`...
retry         `Retry`: how a batch item or a flow step is tried again
local         the seams implemented in this process: `LOCAL`
registry      `init`, `current_backend`, `use_backend`: the backend of this process, and
              `backend_plugin`: a backend found through the entry-point group
              `raygent.backends`, never imported by name
attempt       `current_attempt`, `AttemptState`: what a batch sets around an item's
              attempt for the run it makes (a job's budget, a retry's continuation)
request_path  `request_path`: a run's model access built from its options, link by link
              (cache, route, budget, bound) in one documented order
link          `Link`: the base of every link (routes a fallback model once)
budgeted      `BudgetedAccess`: the budget link (a request held to the run's budgets)
provider_lines  `TripLines`, `current_lines`: an attempt's way to its provider batches
_endpoint_bound  an endpoint's bound in this process (each request under its own limit)

May import the base, models' contract, budgets and memory (session
persistence). Never a backend:
raygent.actors plugs in at run time through the registry.
"""

from .batch import EMPTY_USAGE, BatchItem, Deliver, Feed, ItemStatus, Job, Outcome
from .budgeted import BudgetedAccess
from .contract import (
    Backend,
    BackendPlugin,
    BatchExecution,
    BatchPool,
    Budgets,
    ModelAccess,
    PoolPlan,
    ProviderBatchPool,
    ToolExecution,
)
from .local import LOCAL, LocalModelAccess, LocalToolExecution, closing_stream, routed
from .registry import backend_plugin, current_backend, init, use_backend
from .request_path import Link, request_path
from .retry import Retry

__all__ = [
    "EMPTY_USAGE",
    "LOCAL",
    "Backend",
    "BackendPlugin",
    "BatchExecution",
    "BatchItem",
    "BatchPool",
    "BudgetedAccess",
    "Budgets",
    "Deliver",
    "Feed",
    "ItemStatus",
    "Job",
    "Link",
    "LocalModelAccess",
    "LocalToolExecution",
    "ModelAccess",
    "Outcome",
    "PoolPlan",
    "ProviderBatchPool",
    "Retry",
    "ToolExecution",
    "backend_plugin",
    "closing_stream",
    "current_backend",
    "init",
    "request_path",
    "routed",
    "use_backend",
]

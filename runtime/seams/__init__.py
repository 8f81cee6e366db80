"""The seams between the core and where work runs, and the registry that picks a backend.

contract      the protocols a backend implements (`Backend`, `ModelAccess`,
              `ToolExecution`, `BatchExecution`, `BatchPool`, `PoolPlan`,
              `ProviderBatchPool`) and the plug-in a backend package registers
              (`BackendPlugin`)
request       `ModelRequest`: a model request as one typed value, with its
              `RequestContext` (run, session, job, tenant, trip, deadline, `Route`) and
              its `RequestRecord` (rate wait, 429s, sends)
batch         the shapes a batch seam carries: `Job`, `Outcome`, `BatchItem`, `Feed`...
retry         `Retry`: how a batch item or a flow step is tried again
request_path  `request_path`: a run's model access built from its options, link by link
              (cache, route, budget, access) in one documented order
link          `Link`: the base of every link and of the access layer (splits a composite
              model, a fallback, once)
budgeted      `BudgetedAccess`: the budget link (a request held to the run's budgets)
access        `AccessLayer`: admission, send, usage and 429s, once for every backend,
              over a backend's `Admissions` (where its counters live); `RetryPolicy`
local         the seams implemented in this process: `LOCAL`, its `LocalAdmissions`
rated         the rates held in this process (each key's pacer, and the wait for it)
attempt       `RunScope`: what a run inherits from where it runs (a batch's attempt, its
              parent run); `AttemptPlan`: what each attempt of a batch job is given
provider_lines  `TripLines`: an attempt's way to its provider batches
tenants       `Tenant`s by name (`Tenants`: a backend's registry) and a run's tenant in its
              scope; fair_share: a tenant's request admitted (its own limits, then its
              share of the endpoint's bound by weight) in front of `Admissions`
registry      `init`, `current_backend`, `use_backend`, `register_tenant`: the backend of
              this process, and
              `backend_plugin`: a backend found through the entry-point group
              `raygent.backends`, never imported by name
_endpoint_bound  an endpoint's bound in this process (each request under its own limit)

May import the base, models' contract, budgets and memory (session
persistence). Never a backend:
raygent.actors plugs in at run time through the registry.
"""

from .access import AccessLayer, Admission, Admissions, RetryPolicy
from .attempt import AttemptPlan, RunScope
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
from .fair_share import TenantAdmissions
from .link import DIRECT, closing_stream
from .local import LOCAL, LocalAdmissions, LocalModelAccess, LocalToolExecution
from .registry import backend_plugin, current_backend, init, register_tenant, use_backend
from .request import ModelRequest, RequestContext, RequestRecord, Route, Tenant
from .request_path import Link, request_path
from .retry import Retry
from .tenants import LocalTenants, Tenants

__all__ = [
    "DIRECT",
    "EMPTY_USAGE",
    "LOCAL",
    "AccessLayer",
    "Admission",
    "Admissions",
    "AttemptPlan",
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
    "LocalAdmissions",
    "LocalModelAccess",
    "LocalTenants",
    "LocalToolExecution",
    "ModelAccess",
    "ModelRequest",
    "Outcome",
    "PoolPlan",
    "ProviderBatchPool",
    "RequestContext",
    "RequestRecord",
    "Retry",
    "RetryPolicy",
    "Route",
    "RunScope",
    "Tenant",
    "TenantAdmissions",
    "Tenants",
    "ToolExecution",
    "backend_plugin",
    "closing_stream",
    "current_backend",
    "init",
    "register_tenant",
    "request_path",
    "use_backend",
]

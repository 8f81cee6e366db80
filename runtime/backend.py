"""The backend contract: everything a backend (raygent.actors) may use of the core.

A backend implements the seams (`raygent.seams`: model access, tool execution, session
persistence, batch execution) and registers a `BackendPlugin` under the entry-point
group `raygent.backends`; the core finds it there and never names it. What a backend
needs of the core besides the seams is listed here, and only here: the shapes the seams
carry (messages, model requests and replies, batch jobs and items, reports), the core's
run-time pieces a backend re-uses where it runs work (the batch engine's in-flight core
and one attempt of an item, the session scope, delivering reports to observers), and the
errors it raises. The rates' pure arithmetic (`RatePacer`, `Bucket`, `RateWindow`,
`RateLearner`, `rate_estimate`) is here for a backend's own holders of a rate. A backend imports
`raygent`, `raygent.backend` and `raygent.stores`, never another module of the core
(tests/test_layout.py holds it to that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._batch.engine import InFlight
from ._batch.exec import InputError, agent_input, attempt_for, is_runnable
from ._batch.provider.job import with_lines
from ._batch.provider.trip_lines import RelayedLines
from ._batch.sinks import dumps
from .abort import AbortController, AbortSignal, AbortWatch, abortable
from .budgets import Account, Amount, Budget, BudgetLedger
from .durable.scope import scope_of
from .errors import (
    BudgetExceededError,
    ProviderConnectionError,
    RateLimitError,
    RaygentError,
    ToolExecutionError,
    error_dict,
)
from .memory import LocalSessions, Memory, PositionFence, SessionLease, SessionPersistence
from .messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
    messages_from_json,
    messages_to_json,
)
from .models.contract import (
    Done,
    Limits,
    Model,
    ModelOptions,
    ModelResponse,
    ProviderModel,
    StreamChunk,
    as_provider_model,
)
from .observers import registered
from .observers.delivery import deliver, uses_global
from .observers.report import AgentReport, FlowReport
from .rates import (
    DEFAULT_PAUSE,
    Bucket,
    Need,
    RateLearner,
    RateLimit,
    RatePacer,
    RateReading,
    RateWindow,
    crowded_pause,
    need_of,
    read_rate_headers,
)
from .rates import estimate as rate_estimate
from .redaction import logger as redacting_logger
from .seams import (
    EMPTY_USAGE,
    AccessLayer,
    Admission,
    Admissions,
    AttemptPlan,
    Backend,
    BackendPlugin,
    BatchExecution,
    BatchItem,
    BatchPool,
    Deliver,
    Feed,
    Job,
    ModelAccess,
    ModelRequest,
    Outcome,
    PoolPlan,
    ProviderBatchPool,
    RequestContext,
    Retry,
    RetryPolicy,
    Tenant,
    TenantAdmissions,
    Tenants,
    ToolExecution,
    closing_stream,
    current_backend,
    use_backend,
)
from .seams.batch import Attempt, cancelled, ended, session_of
from .seams.rated import PROBE_WINDOW, HeldBack, reading_of_error, wait_held_back
from .tools import Tool, ToolContext, ToolTimeoutError
from .toolsets import close_toolsets, owning_toolsets
from .usage import Cost, Usage

if TYPE_CHECKING:
    from .agents import RunOptions

__all__ = [
    "DEFAULT_PAUSE",
    "EMPTY_USAGE",
    "PROBE_WINDOW",
    "AbortController",
    "AbortSignal",
    "AbortWatch",
    "AccessLayer",
    "Account",
    "Admission",
    "Admissions",
    "AgentReport",
    "Amount",
    "AssistantMessage",
    "Attempt",
    "AttemptPlan",
    "Backend",
    "BackendPlugin",
    "BatchExecution",
    "BatchItem",
    "BatchPool",
    "Bucket",
    "Budget",
    "BudgetExceededError",
    "BudgetLedger",
    "Cost",
    "Deliver",
    "Done",
    "Feed",
    "FlowReport",
    "HeldBack",
    "InFlight",
    "InputError",
    "Job",
    "Limits",
    "LocalSessions",
    "Memory",
    "Message",
    "Model",
    "ModelAccess",
    "ModelOptions",
    "ModelRequest",
    "ModelResponse",
    "Need",
    "Outcome",
    "PoolPlan",
    "PositionFence",
    "ProviderBatchPool",
    "ProviderConnectionError",
    "ProviderModel",
    "RateLearner",
    "RateLimit",
    "RateLimitError",
    "RatePacer",
    "RateReading",
    "RateWindow",
    "RaygentError",
    "RelayedLines",
    "RequestContext",
    "Retry",
    "RetryPolicy",
    "RunOptions",
    "SessionLease",
    "SessionPersistence",
    "StreamChunk",
    "SystemMessage",
    "Tenant",
    "TenantAdmissions",
    "Tenants",
    "Tool",
    "ToolContext",
    "ToolExecution",
    "ToolExecutionError",
    "ToolMessage",
    "ToolTimeoutError",
    "Usage",
    "UserMessage",
    "abortable",
    "agent_input",
    "as_provider_model",
    "attempt_for",
    "cancelled",
    "close_toolsets",
    "closing_stream",
    "crowded_pause",
    "current_backend",
    "deliver",
    "dumps",
    "ended",
    "error_dict",
    "is_runnable",
    "messages_from_json",
    "messages_to_json",
    "need_of",
    "owning_toolsets",
    "rate_estimate",
    "read_rate_headers",
    "reading_of_error",
    "redacting_logger",
    "registered",
    "scope_of",
    "session_of",
    "use_backend",
    "uses_global",
    "wait_held_back",
    "with_lines",
]

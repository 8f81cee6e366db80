"""raygent: an agent runtime for Python that runs on Ray.

The public API is what this module exports; everything else is internal.
"""

from . import compaction, data, errors, eval, observers
from ._batch import (
    BatchResult,
    Estimate,
    ProviderBatch,
    Retry,
    Route,
    batch,
    batch_sync,
    estimate,
    estimate_sync,
)
from ._version import __version__
from .abort import AbortController, AbortSignal
from .agents import Agent, AgentStream, Approve, Deny, Durable, SystemPrompt, agent
from .agents.fallback import fallback_model
from .agents.middleware import Middleware
from .agents.output import Repair
from .agents.session import Session
from .attachments import AttachmentPolicy, OutboundPolicy
from .budgets import Budget
from .cache import ResponseCache
from .compaction import Compaction, CompactionResult
from .errors import BudgetExceededError
from .executable import Executable
from .flows import (
    END,
    FlowReport,
    FlowResult,
    Goto,
    Router,
    Step,
    Supervisor,
    SupervisorState,
    Vote,
    Workflow,
    WorkflowState,
    fan_out,
    router,
    step,
    supervisor,
    vote,
    workflow,
)
from .memory import Memory
from .messages import (
    AssistantMessage,
    ImagePart,
    Message,
    ProviderBlock,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from .models import (
    AnthropicModel,
    BedrockModel,
    Capabilities,
    GeminiModel,
    Model,
    ModelOptions,
    ModelResponse,
    OpenAIModel,
    OpenAIResponsesModel,
    ResponseSchema,
    ServerCompaction,
    Tier,
    ToolSpec,
)
from .observers.report import AgentReport, AgentResult, PendingCall
from .pricing import Pricing
from .rates import RateLimit, RateReading
from .seams.registry import current_backend, init, register_tenant
from .seams.request import Tenant
from .tools import Tool, ToolContext, ToolResult, tool
from .usage import Cost, Usage, total_cost

__all__ = [
    "END",
    "AbortController",
    "AbortSignal",
    "Agent",
    "AgentReport",
    "AgentResult",
    "AgentStream",
    "AnthropicModel",
    "Approve",
    "AssistantMessage",
    "AttachmentPolicy",
    "BatchResult",
    "BedrockModel",
    "Budget",
    "BudgetExceededError",
    "Capabilities",
    "Compaction",
    "CompactionResult",
    "Cost",
    "Deny",
    "Durable",
    "Estimate",
    "Executable",
    "FlowReport",
    "FlowResult",
    "GeminiModel",
    "Goto",
    "ImagePart",
    "Memory",
    "Message",
    "Middleware",
    "Model",
    "ModelOptions",
    "ModelResponse",
    "OpenAIModel",
    "OpenAIResponsesModel",
    "OutboundPolicy",
    "PendingCall",
    "Pricing",
    "ProviderBatch",
    "ProviderBlock",
    "RateLimit",
    "RateReading",
    "Repair",
    "ResponseCache",
    "ResponseSchema",
    "Retry",
    "Route",
    "Router",
    "ServerCompaction",
    "Session",
    "Step",
    "Supervisor",
    "SupervisorState",
    "SystemMessage",
    "SystemPrompt",
    "Tenant",
    "TextPart",
    "Tier",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolMessage",
    "ToolResult",
    "ToolSpec",
    "Usage",
    "UserMessage",
    "Vote",
    "Workflow",
    "WorkflowState",
    "__version__",
    "agent",
    "batch",
    "batch_sync",
    "compaction",
    "current_backend",
    "data",
    "errors",
    "estimate",
    "estimate_sync",
    "eval",
    "fallback_model",
    "fan_out",
    "init",
    "observers",
    "register_tenant",
    "router",
    "step",
    "supervisor",
    "tool",
    "total_cost",
    "vote",
    "workflow",
]

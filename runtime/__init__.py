"""raygent: an agent runtime for Python that runs on Ray.

The public API is what this module exports; everything else is internal.
"""

from . import errors
from .abort import AbortController, AbortSignal
from .agents import Agent, AgentStream, SystemPrompt, agent
from .fallback import fallback_model
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
from .middleware import Middleware
from .models import (
    AnthropicModel,
    Capabilities,
    Model,
    ModelOptions,
    ModelResponse,
    OpenAIModel,
    ResponseSchema,
    ToolSpec,
)
from .output import Repair
from .pricing import Pricing
from .report import AgentReport, AgentResult
from .tools import Tool, ToolContext, tool
from .usage import Cost, Usage, total_cost

__version__ = "0.1.0"

__all__ = [
    "AbortController",
    "AbortSignal",
    "Agent",
    "AgentReport",
    "AgentResult",
    "AgentStream",
    "AnthropicModel",
    "AssistantMessage",
    "Capabilities",
    "Cost",
    "ImagePart",
    "Message",
    "Middleware",
    "Model",
    "ModelOptions",
    "ModelResponse",
    "OpenAIModel",
    "Pricing",
    "ProviderBlock",
    "Repair",
    "ResponseSchema",
    "SystemMessage",
    "SystemPrompt",
    "TextPart",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolMessage",
    "ToolSpec",
    "Usage",
    "UserMessage",
    "__version__",
    "agent",
    "errors",
    "fallback_model",
    "tool",
    "total_cost",
]

"""Model adapters: the contract, and the OpenAI and Anthropic wire formats over httpx."""

from .anthropic import AnthropicModel
from .contract import (
    CacheControl,
    Capabilities,
    Done,
    FinishReason,
    Model,
    ModelOptions,
    ModelResponse,
    ReasoningDelta,
    ReasoningOptions,
    ResponseSchema,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    UsageChunk,
)
from .openai import OpenAIModel

__all__ = [
    "AnthropicModel",
    "CacheControl",
    "Capabilities",
    "Done",
    "FinishReason",
    "Model",
    "ModelOptions",
    "ModelResponse",
    "OpenAIModel",
    "ReasoningDelta",
    "ReasoningOptions",
    "ResponseSchema",
    "StreamChunk",
    "TextDelta",
    "ToolCallDelta",
    "ToolSpec",
    "UsageChunk",
]

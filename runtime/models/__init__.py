"""Model adapters: the contract, and the OpenAI (Chat Completions, Responses),
Anthropic and Gemini (Gemini API, Vertex AI) wire formats.

The contract (`contract`: the `Model` protocol, options, responses, stream chunks, tool
specs) belongs to the base every part speaks. May import the base only.
"""

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
    ServerCompaction,
    StreamChunk,
    TextDelta,
    Tier,
    ToolCallDelta,
    ToolSpec,
    UsageChunk,
)
from .gemini import GeminiModel
from .openai import OpenAIModel
from .openai_responses import OpenAIResponsesModel

__all__ = [
    "AnthropicModel",
    "CacheControl",
    "Capabilities",
    "Done",
    "FinishReason",
    "GeminiModel",
    "Model",
    "ModelOptions",
    "ModelResponse",
    "OpenAIModel",
    "OpenAIResponsesModel",
    "ReasoningDelta",
    "ReasoningOptions",
    "ResponseSchema",
    "ServerCompaction",
    "StreamChunk",
    "TextDelta",
    "Tier",
    "ToolCallDelta",
    "ToolSpec",
    "UsageChunk",
]

"""Model adapters: the contract, and the OpenAI (Chat Completions, Responses),
Anthropic, Gemini (Gemini API, Vertex AI) and Bedrock (Converse) wire formats over HTTP.

The contract (`contract`: the `Model` protocol, options, responses, stream chunks, tool
specs) belongs to the base every part speaks. May import the base only.
"""

from .anthropic import AnthropicModel
from .bedrock import BedrockBatch, BedrockModel
from .by_name import model_from_name
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
    "BedrockBatch",
    "BedrockModel",
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
    "model_from_name",
]

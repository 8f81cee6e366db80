"""Provider simulator: a local HTTP server speaking the OpenAI Chat Completions, OpenAI
Responses, Anthropic Messages and Gemini (Gemini API and Vertex AI) wires, scripted
replies, latency, rate caps and faults.

It plays the provider, so it stands alone: it imports nothing else of raygent.
"""

from ._rates import SimRateLimits
from ._script import (
    Fault,
    Latency,
    Match,
    Reply,
    Rule,
    Script,
    ServerToolReply,
    ToolCallReply,
    UsageOverride,
)
from ._serve import Simulator, serve
from ._stats import RecordedRequest, SimStats
from ._tiers import ServiceTiers

__all__ = [
    "Fault",
    "Latency",
    "Match",
    "RecordedRequest",
    "Reply",
    "Rule",
    "Script",
    "ServerToolReply",
    "ServiceTiers",
    "SimRateLimits",
    "SimStats",
    "Simulator",
    "ToolCallReply",
    "UsageOverride",
    "serve",
]

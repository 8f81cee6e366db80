"""Provider simulator: a local HTTP server speaking the OpenAI Chat Completions, OpenAI
Responses, Anthropic Messages, Bedrock Converse (and Bedrock's batch inference jobs)
and Gemini (the Gemini API and Vertex AI, their batches) wires, scripted replies,
latency, rate caps and faults.

It plays the provider, so it stands alone: it imports nothing else of raygent.
"""

from ._batch_times import BatchTimes
from ._bedrock_auth import TEST_CREDENTIALS as AWS_TEST_CREDENTIALS
from ._bedrock_auth import TEST_SESSION_CREDENTIALS as AWS_TEST_SESSION_CREDENTIALS
from ._bedrock_auth import AwsTestCredentials
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
    "AWS_TEST_CREDENTIALS",
    "AWS_TEST_SESSION_CREDENTIALS",
    "AwsTestCredentials",
    "BatchTimes",
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

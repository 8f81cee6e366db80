"""The attribute, metric and value names raygent's telemetry uses.

The `gen_ai.*`, `error.*`, `server.*` and `openai.*` names are OpenTelemetry's GenAI
semantic conventions, spelt here rather than imported: the conventions package is an
incubating module (its GenAI part moved to its own repository), and the core imports
nothing optional at run time. `tests/observe/test_otel_names.py` checks every one against
the constants of `opentelemetry-semantic-conventions`, so a rename upstream fails there.
raygent's own facts are under `raygent.*`.
"""

from __future__ import annotations

from typing import Final

# -- the GenAI semantic conventions: attributes --------------------------------------------
OPERATION: Final = "gen_ai.operation.name"
PROVIDER: Final = "gen_ai.provider.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
RESPONSE_MODEL: Final = "gen_ai.response.model"
FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
REASONING_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
AGENT_NAME: Final = "gen_ai.agent.name"
AGENT_VERSION: Final = "gen_ai.agent.version"
WORKFLOW_NAME: Final = "gen_ai.workflow.name"
CONVERSATION: Final = "gen_ai.conversation.id"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
TOOL_TYPE: Final = "gen_ai.tool.type"
TOOL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"  # opt-in content
TOOL_RESULT: Final = "gen_ai.tool.call.result"  # opt-in content
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"  # opt-in content
TOKEN_TYPE: Final = "gen_ai.token.type"
ERROR_TYPE: Final = "error.type"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
# The conventions name a service tier for OpenAI alone; other providers' go under raygent.*.
OPENAI_REQUEST_TIER: Final = "openai.request.service_tier"
OPENAI_RESPONSE_TIER: Final = "openai.response.service_tier"

# Values of gen_ai.operation.name, gen_ai.token.type and gen_ai.tool.type.
CHAT: Final = "chat"
INVOKE_AGENT: Final = "invoke_agent"
INVOKE_WORKFLOW: Final = "invoke_workflow"
EXECUTE_TOOL: Final = "execute_tool"
TOKEN_INPUT: Final = "input"
TOKEN_OUTPUT: Final = "output"
FUNCTION_TOOL: Final = "function"
OTHER_ERROR: Final = "_OTHER"  # error.type when nothing better is known

# gen_ai.provider.name: the conventions' well-known value for each raygent provider name;
# a provider not listed is named as raygent names it.
PROVIDERS: Final[dict[str, str]] = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
    "vertex": "gcp.vertex_ai",
    "vertex_ai": "gcp.vertex_ai",
    "bedrock": "aws.bedrock",
    "azure": "azure.ai.openai",
    "azure_openai": "azure.ai.openai",
    "cohere": "cohere",
    "deepseek": "deepseek",
    "groq": "groq",
    "mistral": "mistral_ai",
    "perplexity": "perplexity",
    "xai": "x_ai",
}

# -- the GenAI semantic conventions: metrics (name, unit, bucket advice) -------------------
TOKEN_USAGE: Final = "gen_ai.client.token.usage"
TOKEN_USAGE_UNIT: Final = "{token}"
TOKEN_BUCKETS: Final = (
    *(1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576),
    *(4194304, 16777216, 67108864),
)
DURATION: Final = "gen_ai.client.operation.duration"
DURATION_UNIT: Final = "s"
DURATION_BUCKETS: Final = (
    *(0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12),
    *(10.24, 20.48, 40.96, 81.92),
)

# -- raygent's own ------------------------------------------------------------------------
RUN_ID: Final = "raygent.run_id"
ROOT_RUN_ID: Final = "raygent.root_run_id"
PARENT_RUN_ID: Final = "raygent.parent_run_id"
STATUS: Final = "raygent.status"
KIND: Final = "raygent.kind"
COST: Final = "raygent.cost_usd"
REQUESTS: Final = "raygent.usage.requests"
TENANT: Final = "raygent.tenant"
JOB: Final = "raygent.job"
ROUTE: Final = "raygent.route"  # "online", or "batch": a line of a provider batch
PROVIDER_BATCH: Final = "raygent.provider_batch"
BATCH_WAIT: Final = "raygent.batch_wait"
CACHE: Final = "raygent.cache"  # hit, miss, unavailable
CACHE_SAVED: Final = "raygent.cache.saved_usd"
RATE_WAIT: Final = "raygent.rate_wait"
THROTTLED: Final = "raygent.throttled"  # 429s met
TIER_FALLBACKS: Final = "raygent.tier_fallbacks"
REQUEST_TIER: Final = "raygent.request.service_tier"
RESPONSE_TIER: Final = "raygent.response.service_tier"
FALLBACK: Final = "raygent.fallback"  # what a failed attempt fell back by: "model", "tier"
ATTEMPT_EVENT: Final = "raygent.attempt.failed"

# raygent's metrics (counters; recorded once per request beside the conventions' own).
COST_METRIC: Final = "raygent.client.cost"
CACHE_HITS_METRIC: Final = "raygent.client.cache.hits"
THROTTLED_METRIC: Final = "raygent.client.throttled"
RATE_WAIT_METRIC: Final = "raygent.client.rate_wait"
FAILED_ATTEMPTS_METRIC: Final = "raygent.client.failed_attempts"


def provider_name(provider: str) -> str:
    """gen_ai.provider.name for a raygent provider name."""
    return PROVIDERS.get(provider, provider)


def tier_name(provider: str, *, response: bool) -> str:
    """The service tier's attribute: the conventions' for OpenAI, raygent's for others."""
    if provider == "openai":
        return OPENAI_RESPONSE_TIER if response else OPENAI_REQUEST_TIER
    return RESPONSE_TIER if response else REQUEST_TIER


def present(attributes: dict[str, object]) -> dict[str, object]:
    """The attributes that have a value (OpenTelemetry refuses None)."""
    return {key: value for key, value in attributes.items() if value is not None}

"""Every OpenTelemetry name raygent's telemetry uses is the conventions' own: checked
against the constants of `opentelemetry-semantic-conventions`, so a rename upstream
fails here. The metrics carry the conventions' units and bucket advice."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.attributes import openai_attributes as openai
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.semconv.attributes import error_attributes, server_attributes
from otel_support import Telemetry

from raygent import Usage
from raygent.observers.otel import RequestRecord
from raygent.observers.otel import names as n

# Each name of ours and the conventions' constant it must equal.
ATTRIBUTES = {
    n.OPERATION: gen_ai.GEN_AI_OPERATION_NAME,
    n.PROVIDER: gen_ai.GEN_AI_PROVIDER_NAME,
    n.REQUEST_MODEL: gen_ai.GEN_AI_REQUEST_MODEL,
    n.RESPONSE_MODEL: gen_ai.GEN_AI_RESPONSE_MODEL,
    n.FINISH_REASONS: gen_ai.GEN_AI_RESPONSE_FINISH_REASONS,
    n.INPUT_TOKENS: gen_ai.GEN_AI_USAGE_INPUT_TOKENS,
    n.OUTPUT_TOKENS: gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS,
    n.CACHE_READ_TOKENS: gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    n.CACHE_WRITE_TOKENS: gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
    n.REASONING_TOKENS: gen_ai.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
    n.AGENT_NAME: gen_ai.GEN_AI_AGENT_NAME,
    n.AGENT_VERSION: gen_ai.GEN_AI_AGENT_VERSION,
    n.WORKFLOW_NAME: gen_ai.GEN_AI_WORKFLOW_NAME,
    n.CONVERSATION: gen_ai.GEN_AI_CONVERSATION_ID,
    n.TOOL_NAME: gen_ai.GEN_AI_TOOL_NAME,
    n.TOOL_CALL_ID: gen_ai.GEN_AI_TOOL_CALL_ID,
    n.TOOL_TYPE: gen_ai.GEN_AI_TOOL_TYPE,
    n.TOOL_ARGUMENTS: gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS,
    n.TOOL_RESULT: gen_ai.GEN_AI_TOOL_CALL_RESULT,
    n.OUTPUT_MESSAGES: gen_ai.GEN_AI_OUTPUT_MESSAGES,
    n.TOKEN_TYPE: gen_ai.GEN_AI_TOKEN_TYPE,
    n.ERROR_TYPE: error_attributes.ERROR_TYPE,
    n.SERVER_ADDRESS: server_attributes.SERVER_ADDRESS,
    n.SERVER_PORT: server_attributes.SERVER_PORT,
    n.OPENAI_REQUEST_TIER: openai.OPENAI_REQUEST_SERVICE_TIER,
    n.OPENAI_RESPONSE_TIER: openai.OPENAI_RESPONSE_SERVICE_TIER,
}
OPERATIONS = gen_ai.GenAiOperationNameValues
PROVIDERS = {value.value for value in gen_ai.GenAiProviderNameValues}
# The conventions' bucket advice (docs/gen-ai/gen-ai-metrics.md), which the Python
# package does not carry.
ADVISED_DURATIONS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24]
ADVISED_DURATIONS += [20.48, 40.96, 81.92]
ADVISED_TOKENS = [4**power for power in range(14)]


def test_every_attribute_name_is_the_conventions_constant() -> None:
    for ours, theirs in ATTRIBUTES.items():
        assert ours == theirs
    # Nothing of ours is spelt in a namespace the conventions own.
    owned = ("gen_ai.", "error.", "server.", "openai.")
    spelt = {value for key, value in vars(n).items() if key.isupper() and isinstance(value, str)}
    metrics = {
        gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE: n.TOKEN_USAGE,
        gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION: n.DURATION,
    }
    assert all(ours == theirs for theirs, ours in metrics.items())
    assert {name for name in spelt if name.startswith(owned)} <= {*ATTRIBUTES, *metrics}


def test_every_value_is_a_well_known_one() -> None:
    assert OPERATIONS.CHAT.value == n.CHAT
    assert OPERATIONS.INVOKE_AGENT.value == n.INVOKE_AGENT
    assert OPERATIONS.INVOKE_WORKFLOW.value == n.INVOKE_WORKFLOW
    assert OPERATIONS.EXECUTE_TOOL.value == n.EXECUTE_TOOL
    assert gen_ai.GenAiTokenTypeValues.INPUT.value == n.TOKEN_INPUT
    assert gen_ai.GenAiTokenTypeValues.OUTPUT.value == n.TOKEN_OUTPUT
    assert n.FUNCTION_TOOL == "function"  # gen_ai.tool.type's value for a function tool
    assert set(n.PROVIDERS.values()) <= PROVIDERS
    assert n.provider_name("gemini") == gen_ai.GenAiProviderNameValues.GCP_GEMINI.value
    assert n.provider_name("bedrock") == gen_ai.GenAiProviderNameValues.AWS_BEDROCK.value
    assert n.provider_name("my-gateway") == "my-gateway"  # not well known: as raygent names it


def test_the_metrics_carry_the_conventions_names_units_and_bucket_advice() -> None:
    # The conventions' own instruments, made by their package, as the reference.
    reference = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reference]).get_meter("reference")
    gen_ai_metrics.create_gen_ai_client_token_usage(meter).record(1)
    gen_ai_metrics.create_gen_ai_client_operation_duration(meter).record(1.0)
    theirs = _by_name(reference)
    telemetry = Telemetry()
    usage = Usage(requests=1, input_tokens=100, output_tokens=7)
    telemetry.otel.request_settled(
        RequestRecord(provider="openai", model="gpt", usage=usage, duration=0.5)
    )
    ours = telemetry.metrics()
    for name in (n.TOKEN_USAGE, n.DURATION):
        assert ours[name].unit == theirs[name].unit  # type: ignore[attr-defined]
    tokens = ours[n.TOKEN_USAGE].data.data_points
    durations = ours[n.DURATION].data.data_points
    assert all(isinstance(p, HistogramDataPoint) for p in [*tokens, *durations])
    assert [list(p.explicit_bounds) for p in tokens] == [ADVISED_TOKENS] * 2
    assert [list(p.explicit_bounds) for p in durations] == [ADVISED_DURATIONS]
    assert sorted(p.attributes[n.TOKEN_TYPE] for p in tokens) == ["input", "output"]
    telemetry.close()


def _by_name(reader: InMemoryMetricReader) -> dict[str, object]:
    data = reader.get_metrics_data()
    assert data is not None
    return {m.name: m for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics}

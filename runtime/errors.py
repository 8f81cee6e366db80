"""One error hierarchy. Every error has a `code`, a `category` and a `retryable` flag."""

from __future__ import annotations

from typing import Any, ClassVar

from .redaction import redact, redact_value
from .usage import Usage

__all__ = [
    "AbortedError",
    "AgentCancelledError",
    "AgentIncompleteError",
    "AttachmentError",
    "AuthenticationError",
    "AwaitingApprovalError",
    "BudgetExceededError",
    "CapabilityError",
    "ContentBlockedError",
    "ContentFilterError",
    "ContextLengthExceededError",
    "DeadlineError",
    "DriftError",
    "FlowOutputError",
    "GuardrailInterventionError",
    "InvalidOptionsError",
    "InvalidRequestError",
    "JobCheckError",
    "JobStoppedError",
    "MCPServerError",
    "MaxIterationsError",
    "MaxStepsError",
    "MaxTripsError",
    "OfflineError",
    "OutboundPolicyError",
    "PromptError",
    "ProviderBatchError",
    "ProviderBatchExpiredError",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderResponseError",
    "ProviderTimeoutError",
    "RateLimitError",
    "RaygentError",
    "RecitationError",
    "RefusalError",
    "RoutingError",
    "RunNotFoundError",
    "SchemaValidationError",
    "ServerError",
    "SinkExistsError",
    "StepFailedError",
    "ToolDeniedError",
    "ToolExecutionError",
    "UnknownOptionError",
    "UnknownTenantError",
    "error_dict",
    "redact",
]


class RaygentError(Exception):
    """Base of every raygent error.

    `details` holds extra typed facts (status, provider, retry_after, ...); it is what
    `to_dict()` reports and what survives pickling across Ray workers. The message and
    every string in the details are redacted when the error is made (and again by
    `to_dict()`), so no API key known to this process leaves through an error.
    """

    code: ClassVar[str] = "RAYGENT_ERROR"
    category: ClassVar[str] = "internal"
    default_retryable: ClassVar[bool] = False

    def __init__(self, message: str, *, retryable: bool | None = None, **details: Any) -> None:
        message = redact_value(message)
        super().__init__(message)
        self.message = message
        self.retryable = self.default_retryable if retryable is None else retryable
        self.details: dict[str, Any] = redact_value(details)

    def __getattr__(self, name: str) -> Any:
        # Only called for missing attributes: expose details as attributes (err.status).
        details = self.__dict__.get("details", {})
        if name in details:
            return details[name]
        raise AttributeError(name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.retryable, self.details))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description for reports and stores (redacted: details may have
        been added since the error was made)."""
        info: dict[str, Any] = redact_value(
            {
                "type": type(self).__name__,
                "code": self.code,
                "category": self.category,
                "retryable": self.retryable,
                "message": self.message,
                **self.details,
            }
        )
        return info


def error_dict(error: BaseException) -> dict[str, Any]:
    """Any exception as a JSON-ready, redacted dict: a raygent error's `to_dict()`, else
    its type and message (a foreign error's text may hold a key too)."""
    if isinstance(error, RaygentError):
        return error.to_dict()
    return {"type": type(error).__name__, "message": redact(str(error))}


def _rebuild(
    cls: type[RaygentError], message: str, retryable: bool, details: dict[str, Any]
) -> RaygentError:
    return cls(message, retryable=retryable, **details)


class AbortedError(RaygentError):
    """The caller's abort signal fired; the in-flight request was closed.

    `usage`: set when a model request was cut off after it had been sent (the provider
    may bill it): one request, its estimated input tokens, priced at the model's input
    rate; its output is unknown and not counted. None: nothing was sent."""

    code = "ABORTED"
    category = "cancelled"
    usage: Usage | None = None


class OfflineError(RaygentError):
    """RAYGENT_OFFLINE is set and a request was about to leave this machine."""

    code = "OFFLINE"
    category = "config"


class ProviderError(RaygentError):
    """A model provider refused or failed a request.

    details: provider, status (HTTP status or None), request_id, provider_code.
    """

    code = "PROVIDER_ERROR"
    category = "provider"


class RateLimitError(ProviderError):
    """429: too many requests or tokens. `retry_after` is in seconds when the provider says."""

    code = "PROVIDER_RATE_LIMITED"
    default_retryable = True

    @property
    def for_capacity(self) -> bool:
        """Whether this is a service tier's refusal for capacity (OpenAI flex's 429
        `resource_unavailable`; a Gemini flex request shed with 503, marked
        `capacity=True`), not the key's rate: it says nothing of how fast the key may
        send, so nobody pauses for it."""
        if self.details.get("capacity"):
            return True
        code = (getattr(self, "provider_code", None) or "").lower()
        return code == "resource_unavailable" or "resource unavailable" in str(self).lower()


class ProviderTimeoutError(ProviderError):
    code = "PROVIDER_TIMEOUT"
    default_retryable = True


class ProviderConnectionError(ProviderError):
    """The connection failed or dropped before a reply was complete."""

    code = "PROVIDER_CONNECTION"
    default_retryable = True


class AuthenticationError(ProviderError):
    """401/403: the key is missing, wrong, or not allowed."""

    code = "PROVIDER_AUTHENTICATION"


class InvalidRequestError(ProviderError):
    """400/404/422: the request itself is wrong; retrying will not help."""

    code = "PROVIDER_INVALID_REQUEST"


class ContextLengthExceededError(InvalidRequestError):
    """The prompt does not fit the model's context window."""

    code = "PROVIDER_CONTEXT_LENGTH"


class ContentFilterError(ProviderError):
    """The provider refused or filtered the content."""

    code = "PROVIDER_CONTENT_FILTER"


class ContentBlockedError(ContentFilterError):
    """The provider's safety system blocked the prompt or withheld the reply (Gemini's
    `promptFeedback.blockReason`, or a candidate finishing `SAFETY`, `BLOCKLIST`,
    `PROHIBITED_CONTENT`, `SPII`, ...). details: blocked ("prompt" or "reply"), reason
    (the provider's), safety_ratings (the categories that blocked, when given)."""

    code = "PROVIDER_CONTENT_BLOCKED"


class RecitationError(ContentFilterError):
    """The reply was stopped because it recited a source too closely (Gemini's
    `RECITATION`). A retry may phrase it otherwise. details: reason, citations."""

    code = "PROVIDER_RECITATION"
    default_retryable = True


class GuardrailInterventionError(ContentFilterError):
    """A provider's guardrail stepped in (Bedrock's `guardrail_intervened`): the input or
    the output was blocked. details: provider, guardrail (its id), action_reason, and
    the text the guardrail answered with (`output`)."""

    code = "PROVIDER_GUARDRAIL"


class ServerError(ProviderError):
    """5xx or overloaded: the provider failed; a retry may succeed."""

    code = "PROVIDER_SERVER_ERROR"
    default_retryable = True


class ProviderResponseError(ProviderError):
    """The provider's reply could not be read: not JSON, missing fields, a truncated stream."""

    code = "PROVIDER_BAD_RESPONSE"
    default_retryable = True


class ProviderBatchError(ProviderError):
    """A provider batch failed as a whole: the provider refused its file (the first bad
    line is named) or it could not be submitted. Its lines' trips fail with it.

    details: provider, batch_id, line (1-based, of the first bad line), provider_code.
    """

    code = "PROVIDER_BATCH"


class ProviderBatchExpiredError(ProviderError):
    """A batch line the provider did not answer: its batch expired (24 h) or was
    cancelled, and `ProviderBatch(on_expired="fail")` said not to send it again.

    details: provider, batch_id, custom_id, outcome ("expired" or "cancelled").
    """

    code = "PROVIDER_BATCH_EXPIRED"


class BudgetExceededError(RaygentError):
    """A request's worst case (its input, estimated, plus its `max_tokens` of output, at
    the model's prices) did not fit what is left of a budget: it was not sent. Not
    retryable. details: budget ("run" or "job"), dimension (usd, tokens, input_tokens,
    output_tokens, requests), limit, spent, reserved, needed."""

    code = "BUDGET_EXCEEDED"
    category = "budget"


class AgentCancelledError(RaygentError):
    """The run was cancelled (abort signal or task cancellation).

    details: cancelled_at ("between_trips", "trip", "tools"), reason, trip_index.
    """

    code = "AGENT_CANCELLED"
    category = "cancelled"


class MaxTripsError(RaygentError):
    """The run needed more model trips than `max_trips` allows. details: max_trips."""

    code = "AGENT_MAX_TRIPS"
    category = "agent"


class AgentIncompleteError(RaygentError):
    """The reply was cut off. details: reason ("output_limit" | "context_window"),
    trip_index, continuations. The partial text stays on the result."""

    code = "AGENT_INCOMPLETE"
    category = "incomplete"


class SchemaValidationError(RaygentError):
    """The final reply does not satisfy the output schema. details: issues, text."""

    code = "OUTPUT_VALIDATION"
    category = "output"


class ToolExecutionError(RaygentError):
    """A tool raised, timed out, or could not be called. details: tool, call_id."""

    code = "TOOL_EXECUTION"
    category = "tool"


class MCPServerError(RaygentError):
    """An MCP server could not be reached, died or broke the protocol (the next call
    starts it again). details: server, and tool for a call."""

    code = "MCP_SERVER"
    category = "tool"


class RefusalError(ContentFilterError):
    """The model refused to answer (finish reason `refusal`)."""

    code = "MODEL_REFUSAL"


class InvalidOptionsError(RaygentError):
    """The options of a run do not make sense (e.g. an unknown model option)."""

    code = "INVALID_OPTIONS"
    category = "config"


class UnknownOptionError(InvalidOptionsError, TypeError):
    """An option, a setting or a flag of a name nothing takes (a misspelt one would be
    silently ignored): refused before anything is sent. A `TypeError` too, as Python's
    own unexpected keyword is. details: option (the name given), suggestion (the closest
    known one, or None), where (what was given it)."""

    code = "UNKNOWN_OPTION"


class UnknownTenantError(InvalidOptionsError):
    """`tenant=` names no tenant registered with the backend (`raygent.register_tenant`:
    in this process, or on Ray in the gateway): the run fails unsent. details: tenant."""

    code = "UNKNOWN_TENANT"


class CapabilityError(InvalidOptionsError):
    """The run asks for something its model cannot do (e.g. `server_compaction=` on a
    model without that capability); raised before any request is sent."""

    code = "MODEL_CAPABILITY"


class SinkExistsError(InvalidOptionsError):
    """A batch's sink holds the records of an earlier job, and the batch said neither
    `resume=True` (go on with that job) nor `mode=` (`"overwrite"` or `"append"`)."""

    code = "BATCH_SINK_EXISTS"


class DeadlineError(InvalidOptionsError):
    """A job's `deadline=` (with its `budget=`) cannot be met by any way the model is
    reached, at the route's confidence: refused before anything is sent. details:
    `constraint` ("deadline" or "budget"), `earliest` (the earliest deadline that could
    be met, a datetime, None if none within 30 days) and `least_budget` (USD the
    deadline can be met for, with `constraint="budget"`)."""

    code = "BATCH_DEADLINE"


class JobCheckError(InvalidOptionsError):
    """A batch job refused before its first request and before anything was written to
    its sink: what it asks cannot be done (a capability its model lacks, an option value,
    an output type or tool schema the provider would refuse, a store or sink it cannot
    reach). details: problems, every one found, each {"where": the item of
    configuration, "problem": what is wrong, "fix": what to do}."""

    code = "BATCH_JOB_CHECK"


class JobStoppedError(RaygentError):
    """The item did not complete because its batch stopped first, on a configuration
    error another item met that every item would meet (the report's `stopped` says
    which). Not this item's failure: a resume runs it. details: stopped_by (that item's
    key), cause (its error, as a dict)."""

    code = "BATCH_STOPPED"
    category = "cancelled"


class PromptError(RaygentError):
    """The prompt could not be built (e.g. a `{{placeholder}}` has no value)."""

    code = "PROMPT"
    category = "config"


class AttachmentError(RaygentError):
    """An attachment could not be used: a missing or unreadable file, an unknown kind,
    text that is not UTF-8, a failed download. details: attachment."""

    code = "ATTACHMENT"
    category = "input"


class OutboundPolicyError(RaygentError):
    """The attachment or outbound policy refused: a scheme, host or address not allowed,
    a path outside the allowed roots, a body over the size cap, a timeout. details:
    reason, and the url or path refused."""

    code = "OUTBOUND_POLICY"
    category = "policy"


class AwaitingApprovalError(RaygentError):
    """The run stopped before tool calls that need approval; nothing of that round ran.

    Not a failure: `result.pending` lists the calls and `agent.resume(run_id,
    approvals=...)` continues the run. details: pending (the call ids).
    """

    code = "AGENT_AWAITING_APPROVAL"
    category = "approval"


class DriftError(RaygentError):
    """A durable run was resumed by an agent that differs from the one that started it.

    details: changed (the fields that differ), stored, current. Nothing was changed;
    `resume(..., force=True)` resumes anyway.
    """

    code = "DURABLE_DRIFT"
    category = "durable"


class RunNotFoundError(RaygentError):
    """No durable run is stored under this id (never started, expired, or deleted)."""

    code = "DURABLE_RUN_NOT_FOUND"
    category = "durable"


class ToolDeniedError(ToolExecutionError):
    """A tool call that needed approval was denied; the model gets the reason as the
    call's error result. details: tool, reason."""

    code = "TOOL_DENIED"


class StepFailedError(RaygentError):
    """A workflow step (or a supervisor's intent) failed after its retries and its
    `on_failure` did not route elsewhere. details: step, attempts, branch (a parallel
    step's failing branch), cause (the step's own error, as a dict)."""

    code = "FLOW_STEP_FAILED"
    category = "flow"


class MaxStepsError(RaygentError):
    """A workflow ran `max_steps` steps without reaching its end (a `Goto` loop that does
    not stop). details: max_steps, last_step."""

    code = "FLOW_MAX_STEPS"
    category = "flow"


class FlowOutputError(RaygentError):
    """A step's output, or a flow's final output, does not match its declared model.
    details: step (None for the flow's own output), issues."""

    code = "FLOW_OUTPUT"
    category = "output"


class MaxIterationsError(RaygentError):
    """A supervisor iterated `max_iterations` times without routing to END; the outputs
    so far are on the result. details: max_iterations."""

    code = "SUPERVISOR_MAX_ITERATIONS"
    category = "flow"


class RoutingError(RaygentError):
    """A supervisor's route chose what it cannot run: an unknown intent, more intents at
    once than `max_fan_out`, or no decision. details: decision, intents."""

    code = "SUPERVISOR_ROUTING"
    category = "flow"

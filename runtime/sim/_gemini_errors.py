"""Errors as Google's APIs send them: ``{"error": {"code", "message", "status",
"details"}}``, the ``google.rpc`` details typed by ``@type``, and the 429 past a rate
limit (``RESOURCE_EXHAUSTED`` with ``QuotaFailure`` and ``RetryInfo`` on the Gemini API;
Vertex AI's bare one). No ``x-ratelimit-*`` headers and no ``Retry-After``: Google sends
neither, the delay is in the body."""

from __future__ import annotations

import math
from typing import Any

from pydantic_core import to_json

from ._rates import Refusal

STATUS: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_MESSAGES: dict[int, str] = {
    400: "Request contains an invalid argument.",
    401: (
        "Request had invalid authentication credentials. Expected OAuth 2 access token, "
        "login cookie or other valid authentication credential."
    ),
    403: "The caller does not have permission",
    404: "Requested entity was not found.",
    429: "Resource has been exhausted (e.g. check quota).",
    500: "An internal error has occurred. Please retry or report in "
    "https://developers.generativeai.google/guide/troubleshooting",
    503: "The model is overloaded. Please try again later.",
    504: "Deadline expired before operation could complete.",
}
_TYPE = "type.googleapis.com/google.rpc."
RATE_DOCS = "https://ai.google.dev/gemini-api/docs/rate-limits"
VERTEX_429 = (
    "Resource exhausted. Please try again later. Please refer to "
    "https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details."
)
# (quota metric, quota id) of each limit the simulator keeps, as the Gemini API names them.
_QUOTAS: dict[str, tuple[str, str]] = {
    "requests": (
        "generativelanguage.googleapis.com/generate_content_paid_tier_requests",
        "GenerateRequestsPerMinutePerProjectPerModel",
    ),
    "tokens": (
        "generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count",
        "GenerateContentPaidTierInputTokensPerModelPerMinute",
    ),
    "input_tokens": (
        "generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count",
        "GenerateContentPaidTierInputTokensPerModelPerMinute",
    ),
    "output_tokens": (
        "generativelanguage.googleapis.com/generate_content_paid_tier_output_token_count",
        "GenerateContentPaidTierOutputTokensPerModelPerMinute",
    ),
}


def status_name(status: int) -> str:
    """The canonical code name of an HTTP status, as Google pairs them."""
    return STATUS.get(status) or ("INTERNAL" if status >= 500 else "INVALID_ARGUMENT")


def error_body(
    status: int, message: str | None = None, details: list[dict[str, Any]] | None = None
) -> bytes:
    """``{"error": {"code", "message", "status"[, "details"]}}``."""
    error: dict[str, Any] = {
        "code": status,
        "message": message or _MESSAGES.get(status) or _MESSAGES[500 if status >= 500 else 400],
        "status": status_name(status),
    }
    if details:
        error["details"] = details
    return to_json({"error": error})


def bad_request(field: str, description: str) -> dict[str, Any]:
    """A ``google.rpc.BadRequest`` detail naming the bad field."""
    violation = {"field": field, "description": description}
    return {"@type": _TYPE + "BadRequest", "fieldViolations": [violation]}


def error_info(reason: str, domain: str = "googleapis.com", **metadata: str) -> dict[str, Any]:
    """A ``google.rpc.ErrorInfo`` detail (e.g. ``API_KEY_INVALID``)."""
    info: dict[str, Any] = {"@type": _TYPE + "ErrorInfo", "reason": reason, "domain": domain}
    if metadata:
        info["metadata"] = metadata
    return info


def retry_delay(seconds: float) -> str:
    """A ``google.protobuf.Duration`` in JSON: whole seconds rounded up (``"13s"``)."""
    return f"{max(math.ceil(seconds - 1e-6), 1)}s"


def quota_error(refusal: Refusal, model: str, *, vertex: bool) -> bytes:
    """The 429 past a rate limit: on the Gemini API the quota it exceeded
    (``QuotaFailure``), ``Help`` and, unless the request can never fit, ``RetryInfo``;
    on Vertex AI the bare message Vertex sends."""
    if vertex:
        return error_body(429, VERTEX_429)
    metric, quota_id = _QUOTAS[refusal.cause]
    message = (
        "You exceeded your current quota, please check your plan and billing details. "
        f"For more information on this error, head to: {RATE_DOCS}. "
        "To monitor your current usage, head to: https://ai.dev/usage?tab=rate-limit. \n"
        f"* Quota exceeded for metric: {metric}, limit: {refusal.limit}, model: {model}"
    )
    violation = {
        "quotaMetric": metric,
        "quotaId": quota_id,
        "quotaDimensions": {"location": "global", "model": model},
        "quotaValue": str(refusal.limit),
    }
    details: list[dict[str, Any]] = [
        {
            "@type": _TYPE + "Help",
            "links": [{"description": "Learn more about Gemini API quotas", "url": RATE_DOCS}],
        },
        {"@type": _TYPE + "QuotaFailure", "violations": [violation]},
    ]
    if refusal.wait is not None:
        message += f"\nPlease retry in {refusal.wait:.6f}s."
        details.append({"@type": _TYPE + "RetryInfo", "retryDelay": retry_delay(refusal.wait)})
    return error_body(429, message, details)


def retry_error(message: str, seconds: float) -> bytes:
    """A 429 ``RESOURCE_EXHAUSTED`` whose delay is a ``RetryInfo`` (the simulator's
    concurrency cap, as Google would say it: no ``Retry-After`` header)."""
    details = [{"@type": _TYPE + "RetryInfo", "retryDelay": retry_delay(seconds)}]
    return error_body(429, message, details)

"""Google's error bodies as raygent's typed errors.

Google sends `{"error": {"code", "message", "status", "details"}}` (a stream may send
it inside a 200, and some gateways wrap it in a list). A 429 `RESOURCE_EXHAUSTED`
carries no rate-limit headers and no `Retry-After`: the delay is `google.rpc.RetryInfo`'s
`retryDelay` (or "Please retry in 12.3s." in the message), read into `retry_after` and a
`RateReading`; its `QuotaFailure` names the quota (per minute, per day, or the batch
enqueued-token quota, which frees as earlier batches end and so carries no delay).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import (
    AuthenticationError,
    ContextLengthExceededError,
    InvalidRequestError,
    ProviderError,
    ProviderTimeoutError,
    RateLimitError,
    ServerError,
    redact,
)
from ..rates.limits import RateReading

PROVIDER = "gemini"
_TYPE = "type.googleapis.com/google.rpc."
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s$")
_RETRY_IN = re.compile(r"[Pp]lease retry in (\d+(?:\.\d+)?)(ms|s)")
_CONTEXT = ("exceeds the maximum number of tokens", "input token count", "context window")
_MESSAGE_CHARS = 2000


def error_from_response(
    status: int,
    body: bytes,
    *,
    secrets: tuple[str, ...] = (),
    flex: bool = False,
    request_id: str | None = None,
) -> ProviderError:
    """The typed error of a failed HTTP reply. `flex`: the request asked for the flex
    tier, so a 503 `UNAVAILABLE` is the tier shedding it (`RateLimitError` with
    `capacity=True`: sent again at the fallback tier, and nobody pauses for it)."""
    try:
        data: Any = json.loads(body)
    except (ValueError, RecursionError):
        data = None
    if data is None:
        text = redact(body.decode("utf-8", "replace").strip(), secrets)[:500] or f"HTTP {status}"
        return _typed(status, None, text, [], flex=flex, request_id=request_id)
    return error_from_body(data, status=status, secrets=secrets, flex=flex, request_id=request_id)


def error_from_body(
    data: Any,
    *,
    status: int | None,
    secrets: tuple[str, ...] = (),
    flex: bool = False,
    request_id: str | None = None,
) -> ProviderError:
    """The typed error of a Google error body (a failed reply's, or an error event in a
    stream, whose HTTP status was 200: `status=None` reads it from the body's code)."""
    if isinstance(data, str):  # a body that is not JSON (a proxy's page), as text
        text = redact(data.strip(), secrets)[:500] or f"HTTP {status or 500}"
        return _typed(status or 500, None, text, [], flex=flex, request_id=request_id)
    if isinstance(data, list) and data:
        data = data[0]
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        text = redact(json.dumps(data)[:500], secrets)
        return _typed(status or 500, None, text, [], flex=flex, request_id=request_id)
    code = error.get("code")
    http = status if status is not None else (code if isinstance(code, int) else 500)
    name = error.get("status") if isinstance(error.get("status"), str) else None
    message = redact(str(error.get("message") or f"HTTP {http}"), secrets)[:_MESSAGE_CHARS]
    details = [d for d in error.get("details") or () if isinstance(d, dict)]
    return _typed(http, name, message, details, flex=flex, request_id=request_id)


def _typed(
    status: int,
    name: str | None,
    message: str,
    details: list[dict[str, Any]],
    *,
    flex: bool,
    request_id: str | None,
) -> ProviderError:
    facts: dict[str, Any] = {
        "provider": PROVIDER,
        "status": status,
        "provider_code": name,
        "request_id": request_id,
    }
    text = f"{PROVIDER} HTTP {status} {name or ''}: {message}".replace("  ", " ")
    reason = _reason(details)
    if status == 429:
        return _rate_limited(text, message, details, facts)
    if status in (401, 403) or reason in ("API_KEY_INVALID", "API_KEY_SERVICE_BLOCKED"):
        if "not found" in message.lower():  # a cache or file that is not (or no longer) there
            return InvalidRequestError(text, **facts)
        return AuthenticationError(text, reason=reason, **facts)
    if status in (408, 504) or name == "DEADLINE_EXCEEDED":
        return ProviderTimeoutError(text, **facts)
    if status == 503 and flex:
        return RateLimitError(text, capacity=True, retry_after=None, **facts)
    if status >= 500 or status == 409:
        return ServerError(text, retry_after=_retry_delay(details, message), **facts)
    if any(hint in message.lower() for hint in _CONTEXT):
        return ContextLengthExceededError(text, **facts)
    if "thought signature" in message.lower() or "thought_signature" in message:
        return InvalidRequestError(text, reason="thought_signature", **facts)
    return InvalidRequestError(text, **facts)


def _rate_limited(
    text: str, message: str, details: list[dict[str, Any]], facts: dict[str, Any]
) -> RateLimitError:
    wait = _retry_delay(details, message)
    quota = _quota(details)
    if quota:
        facts = {**facts, **quota}
    if wait is not None:
        facts["rate"] = RateReading(retry_after=wait).model_dump(mode="json")
    # A quota of 0 (a model the project may not use, a free tier without it) never frees.
    retryable = quota.get("quota_value") != "0"
    return RateLimitError(text, retryable=retryable, retry_after=wait, **facts)


def _reason(details: list[dict[str, Any]]) -> str | None:
    for detail in details:
        if detail.get("@type") == _TYPE + "ErrorInfo" and isinstance(detail.get("reason"), str):
            return str(detail["reason"])
    return None


def _retry_delay(details: list[dict[str, Any]], message: str) -> float | None:
    """Seconds from `RetryInfo.retryDelay` ("13s", "0.5s"), else from the message."""
    for detail in details:
        if detail.get("@type") == _TYPE + "RetryInfo":
            match = _DURATION.match(str(detail.get("retryDelay", "")))
            if match is not None:
                return float(match.group(1))
    found = _RETRY_IN.search(message)
    if found is None:
        return None
    value = float(found.group(1))
    return value / 1000 if found.group(2) == "ms" else value


def _quota(details: list[dict[str, Any]]) -> dict[str, Any]:
    for detail in details:
        if detail.get("@type") != _TYPE + "QuotaFailure":
            continue
        for violation in detail.get("violations") or ():
            if isinstance(violation, dict):
                return {
                    "quota_metric": violation.get("quotaMetric"),
                    "quota_id": violation.get("quotaId"),
                    "quota_value": violation.get("quotaValue"),
                }
    return {}

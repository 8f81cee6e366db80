"""HTTP status and provider error bodies -> typed errors.

What a wire reads of an error body is an `ErrorSaid` (its code, message and, where the
provider says so in the body, when to retry); the mapping to a typed error by status and
hints, and the redaction of every part kept, are written here once for every wire.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import (
    AuthenticationError,
    ContentFilterError,
    ContextLengthExceededError,
    InvalidRequestError,
    ProviderError,
    ProviderTimeoutError,
    RateLimitError,
    ServerError,
    redact,
)
from ..rates.limits import rate_headers, read_rate_headers, retry_after

__all__ = [
    "ErrorSaid",
    "error_from_response",
    "error_from_stream_event",
    "read_error_body",
    "retry_after_seconds",
]

_CONTEXT_HINTS = (
    "context_length_exceeded",
    "context length",
    "context window",
    "prompt is too long",
    "maximum context",
    "too many tokens",
)
_FILTER_HINTS = ("content_filter", "content_policy", "content management policy")
_NOT_RETRYABLE_429 = ("insufficient_quota", "billing")


# Cuts, made after redaction: a cut first could leave part of a key in what is kept.
_MESSAGE_CHARS = 2000
_RAW_CHARS = 500
_FIELD_CHARS = 200


@dataclass(frozen=True, slots=True)
class ErrorSaid:
    """What a provider's error body says, as read (not yet redacted or cut).

    `raw`: the message is the body itself (not JSON, or JSON of no known shape), cut
    shorter. `retry_after`: seconds to wait when the body says so (Gemini's `RetryInfo`);
    a `Retry-After` header wins. `request_id`: when the wire finds it elsewhere than the
    `x-request-id` / `request-id` headers."""

    code: str | None
    message: str | None
    raw: bool = False
    retry_after: float | None = None
    request_id: str | None = None


def read_error_body(body: Any) -> ErrorSaid:
    """An OpenAI- or Anthropic-shaped error body (`{"error": {"code" | "type",
    "message"}}` or `{"error": "text"}`), parsed JSON or the raw text."""
    if isinstance(body, str):
        return ErrorSaid(None, body.strip(), raw=True)
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code = error.get("code") or error.get("type")
        message = error.get("message")
        return ErrorSaid(str(code) if code else None, str(message) if message else None)
    if isinstance(error, str):
        return ErrorSaid(None, error)
    return ErrorSaid(None, json.dumps(body), raw=True)


def parse_error_body(body: bytes) -> Any:
    """An error reply's body as JSON, else as text (what `read_error_body` reads)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return body.decode("utf-8", "replace")


def error_from_response(
    status: int,
    headers: Mapping[str, str],
    said: ErrorSaid,
    *,
    provider: str,
    secrets: tuple[str, ...],
) -> ProviderError:
    """Map a failed HTTP reply to the typed error a caller can act on. Every part of the
    reply that the error keeps is redacted of `secrets` (and key-shaped text) whole,
    before it is cut."""
    code = _clean(said.code, secrets, _FIELD_CHARS)
    message = _clean(said.message, secrets, _RAW_CHARS if said.raw else _MESSAGE_CHARS)
    message = message or f"HTTP {status}"
    request_id = said.request_id or headers.get("x-request-id") or headers.get("request-id")
    details: dict[str, Any] = {
        "provider": provider,
        "status": status,
        "provider_code": code,
        "request_id": _clean(request_id, secrets, _FIELD_CHARS),
    }
    hint = f"{code or ''} {message}".lower()
    text = f"{provider} HTTP {status}: {message}"
    if status == 429:
        retryable = not any(h in hint for h in _NOT_RETRYABLE_429)
        found = rate_headers(headers.items())
        reading = read_rate_headers(found, time.time()) if found else None
        if reading is not None:
            # The reading as JSON: details travel (pickled, stored, reported) as data.
            details["rate"] = reading.model_dump(mode="json")
        wait = retry_after_seconds(headers)
        return RateLimitError(
            text,
            retryable=retryable,
            retry_after=said.retry_after if wait is None else wait,
            **details,
        )
    if status in (401, 403):
        return AuthenticationError(text, **details)
    if status == 408:
        return ProviderTimeoutError(text, **details)
    if status in (409, 425) or status >= 500:
        wait = retry_after_seconds(headers)
        return ServerError(text, retry_after=said.retry_after if wait is None else wait, **details)
    if any(h in hint for h in _CONTEXT_HINTS):
        return ContextLengthExceededError(text, **details)
    if any(h in hint for h in _FILTER_HINTS):
        return ContentFilterError(text, **details)
    return InvalidRequestError(text, **details)


def error_from_stream_event(
    said: ErrorSaid | dict[str, Any], *, provider: str, secrets: tuple[str, ...]
) -> ProviderError:
    """Map an error event sent inside a 200 stream (e.g. Anthropic's overloaded_error),
    by its code: what the event says (`ErrorSaid`), or the event's JSON."""
    if not isinstance(said, ErrorSaid):
        said = read_error_body(said)
    code = _clean(said.code, secrets, _FIELD_CHARS)
    message = _clean(said.message, secrets, _RAW_CHARS if said.raw else _MESSAGE_CHARS)
    hint = (code or "").lower()
    text = f"{provider} stream error: {code}: {message or ''}"
    details: dict[str, Any] = {"provider": provider, "status": None, "provider_code": code}
    if "rate_limit" in hint:
        return RateLimitError(text, retry_after=said.retry_after, **details)
    if "invalid_request" in hint:
        return InvalidRequestError(text, **details)
    return ServerError(text, **details)


def _clean(text: str | None, secrets: tuple[str, ...], limit: int) -> str | None:
    """`text` redacted whole, then cut to `limit` characters (None and "" stay None)."""
    if not text:
        return None
    return redact(text, secrets)[:limit] or None


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from retry-after-ms, or Retry-After as seconds or an HTTP date."""
    return retry_after(headers, time.time())

"""HTTP status and provider error bodies -> typed errors."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

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


def error_from_response(
    response: httpx.Response, body: bytes, *, provider: str, secrets: tuple[str, ...]
) -> ProviderError:
    """Map a failed HTTP response to the typed error a caller can act on. Every part of
    the reply that the error keeps is redacted of `secrets` (and key-shaped text) whole,
    before it is cut."""
    status = response.status_code
    code, message = _read_error_body(body, secrets)
    message = message or f"HTTP {status}"
    request_id = response.headers.get("x-request-id") or response.headers.get("request-id")
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
        found = rate_headers(response.headers.multi_items())
        reading = read_rate_headers(found, time.time()) if found else None
        if reading is not None:
            # The reading as JSON: details travel (pickled, stored, reported) as data.
            details["rate"] = reading.model_dump(mode="json")
        return RateLimitError(
            text, retryable=retryable, retry_after=retry_after_seconds(response.headers), **details
        )
    if status in (401, 403):
        return AuthenticationError(text, **details)
    if status == 408:
        return ProviderTimeoutError(text, **details)
    if status in (409, 425) or status >= 500:
        return ServerError(text, retry_after=retry_after_seconds(response.headers), **details)
    if any(h in hint for h in _CONTEXT_HINTS):
        return ContextLengthExceededError(text, **details)
    if any(h in hint for h in _FILTER_HINTS):
        return ContentFilterError(text, **details)
    return InvalidRequestError(text, **details)


def error_from_stream_event(
    data: dict[str, Any], *, provider: str, secrets: tuple[str, ...]
) -> ProviderError:
    """Map an error event sent inside a 200 stream (e.g. Anthropic's overloaded_error)."""
    code, message = _read_error_body(json.dumps(data).encode(), secrets)
    hint = (code or "").lower()
    text = f"{provider} stream error: {code}: {message or ''}"
    details: dict[str, Any] = {"provider": provider, "status": None, "provider_code": code}
    if "rate_limit" in hint:
        return RateLimitError(text, retry_after=None, **details)
    if "invalid_request" in hint:
        return InvalidRequestError(text, **details)
    return ServerError(text, **details)


def _read_error_body(body: bytes, secrets: tuple[str, ...]) -> tuple[str | None, str | None]:
    """(code, message) from an OpenAI- or Anthropic-shaped error body, or the raw text;
    both redacted, then cut."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None, _clean(body.decode("utf-8", "replace").strip(), secrets, _RAW_CHARS)
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        code = error.get("code") or error.get("type")
        message = error.get("message")
        return (
            _clean(str(code) if code else None, secrets, _FIELD_CHARS),
            _clean(str(message) if message else None, secrets, _MESSAGE_CHARS),
        )
    if isinstance(error, str):
        return None, _clean(error, secrets, _MESSAGE_CHARS)
    return None, _clean(json.dumps(data), secrets, _RAW_CHARS)


def _clean(text: str | None, secrets: tuple[str, ...], limit: int) -> str | None:
    """`text` redacted whole, then cut to `limit` characters (None and "" stay None)."""
    if not text:
        return None
    return redact(text, secrets)[:limit] or None


def retry_after_seconds(headers: httpx.Headers) -> float | None:
    """Seconds to wait from retry-after-ms, or Retry-After as seconds or an HTTP date."""
    return retry_after(headers, time.time())

"""Google's error bodies (as the simulator sends them) read into raygent's typed errors,
and Gemini's prices."""

from __future__ import annotations

import json

import httpx
import pytest

from raygent.errors import (
    AuthenticationError,
    ContextLengthExceededError,
    InvalidRequestError,
    ProviderTimeoutError,
    RateLimitError,
    ServerError,
)
from raygent.models import _gemini_errors as errors
from raygent.models import _gemini_prices as prices
from raygent.models import _gemini_wire as wire
from raygent.rates.limits import RateReading
from raygent.sim import ServiceTiers, SimRateLimits, serve
from raygent.usage import Usage

FLASH = "gemini-2.5-flash"
PATH = f"/v1beta/models/{FLASH}:generateContent"
VERTEX = f"/v1/projects/p/locations/global/publishers/google/models/{FLASH}:generateContent"
BODY = {"contents": [{"role": "user", "parts": [{"text": "x"}]}]}


def send(url: str, path: str = PATH, body: object = BODY, **headers: str) -> httpx.Response:
    return httpx.post(url + path, json=body, headers=headers, timeout=10)


def read(response: httpx.Response, **kwargs: object) -> Exception:
    return errors.error_from_response(response.status_code, response.content, **kwargs)  # type: ignore[arg-type]


def test_a_quota_429_reads_its_retry_delay_and_quota() -> None:
    with serve(rate_limits=SimRateLimits(requests_per_minute=60)) as sim:
        send(sim.url)
        response = send(sim.url)
        token = {"Authorization": "Bearer another-key"}  # limits are per key
        vertex_first, vertex_refused = (
            send(sim.url, VERTEX, **token),
            send(sim.url, VERTEX, **token),
        )
    error = read(response)
    assert isinstance(error, RateLimitError) and error.retryable and not error.for_capacity
    assert error.retry_after == 1.0
    assert RateReading.model_validate(error.details["rate"]).retry_after == 1.0
    assert error.details["quota_id"] == "GenerateRequestsPerMinutePerProjectPerModel"
    assert error.details["provider_code"] == "RESOURCE_EXHAUSTED"
    assert vertex_first.status_code == 200
    bare = read(vertex_refused)
    assert (
        isinstance(bare, RateLimitError) and bare.retry_after is None and "rate" not in bare.details
    )


def test_the_retry_delay_in_the_message_when_there_is_no_retry_info() -> None:
    body = {
        "error": {
            "code": 429,
            "message": "Quota exceeded. Please retry in 48.805646254s.",
            "status": "RESOURCE_EXHAUSTED",
        }
    }
    error = errors.error_from_body(body, status=429)
    assert isinstance(error, RateLimitError) and error.retry_after == pytest.approx(48.805646254)
    zero = {
        "error": {
            "code": 429,
            "message": "Quota exceeded.",
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                    "violations": [{"quotaId": "FreeTier", "quotaValue": "0"}],
                }
            ],
        }
    }
    assert not errors.error_from_body(zero, status=429).retryable  # a quota of 0 never frees


def test_the_enqueued_token_quota_has_no_delay() -> None:
    with serve(batch_seconds=30, batch_enqueued_tokens=10) as sim:
        batch = {
            "batch": {
                "inputConfig": {
                    "requests": {
                        "requests": [{"request": {"contents": [{"parts": [{"text": "y" * 200}]}]}}]
                    }
                }
            }
        }
        refused = send(sim.url, f"/v1beta/models/{FLASH}:batchGenerateContent", batch)
    error = read(refused)
    assert isinstance(error, RateLimitError) and error.retry_after is None and error.retryable
    assert (
        error.details["quota_metric"] == "generativelanguage.googleapis.com/batch_enqueued_tokens"
    )


def test_a_flex_request_shed_with_503_is_a_capacity_refusal() -> None:
    with serve(tiers=ServiceTiers(flex_refusal_rate=1.0)) as sim:
        shed = send(sim.url, body={**BODY, "serviceTier": "flex"})
    assert shed.status_code == 503
    as_flex = read(shed, flex=True)
    assert isinstance(as_flex, RateLimitError) and as_flex.for_capacity
    assert isinstance(read(shed), ServerError)  # not a flex request: the service overloaded


def test_auth_context_signature_and_other_errors() -> None:
    with serve({"default": "ok"}, api_key="right", context_window=5) as sim:
        wrong_key = send(sim.url, **{"x-goog-api-key": "wrong"})
        too_long = send(
            sim.url,
            body={"contents": [{"parts": [{"text": "x" * 100}]}]},
            **{"x-goog-api-key": "right"},
        )
        unsigned = send(
            sim.url,
            "/v1beta/models/gemini-3-pro-preview:generateContent",
            {
                "contents": [
                    {"role": "user", "parts": [{"text": "q"}]},
                    {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]},
                    {
                        "role": "user",
                        "parts": [{"functionResponse": {"name": "f", "response": {}}}],
                    },
                ]
            },
            **{"x-goog-api-key": "right"},
        )
    assert isinstance(read(wrong_key), AuthenticationError)
    assert read(wrong_key).details["reason"] == "API_KEY_INVALID"
    assert isinstance(read(too_long), ContextLengthExceededError)
    signature = read(unsigned)
    assert (
        isinstance(signature, InvalidRequestError)
        and signature.details["reason"] == "thought_signature"
    )
    # The Gemini API answers a bad key with 400 and ErrorInfo API_KEY_INVALID too.
    bad_key_400 = {
        "error": {
            "code": 400,
            "message": "API key not valid. Please pass a valid API key.",
            "status": "INVALID_ARGUMENT",
            "details": [
                {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}
            ],
        }
    }
    assert isinstance(errors.error_from_body(bad_key_400, status=400), AuthenticationError)
    timeout = {
        "error": {"code": 504, "message": "Deadline expired.", "status": "DEADLINE_EXCEEDED"}
    }
    assert isinstance(errors.error_from_body(timeout, status=504), ProviderTimeoutError)
    missing = {
        "error": {
            "code": 403,
            "message": "CachedContent not found (or permission denied)",
            "status": "PERMISSION_DENIED",
        }
    }
    assert type(errors.error_from_body(missing, status=403)) is InvalidRequestError


def test_stream_errors_list_bodies_and_text_bodies() -> None:
    with serve(
        {
            "default": {
                "text": "a long reply that streams in pieces",
                "fault": {"kind": "stream_error", "status": 503, "after_chunks": 1},
            }
        }
    ) as sim:
        response = httpx.post(
            f"{sim.url}/v1beta/models/{FLASH}:streamGenerateContent?alt=sse", json=BODY, timeout=10
        )
    state = wire.StreamState()
    blocks = response.text.replace("\r\n", "\n").split("\n\n")
    with pytest.raises(ServerError, match="UNAVAILABLE"):
        for block in blocks:
            if block.startswith("data: "):
                state.feed(json.loads(block[6:]))
    listed = [
        {
            "error": {
                "code": 400,
                "message": "Corrupted thought signature.",
                "status": "INVALID_ARGUMENT",
            }
        }
    ]
    assert isinstance(errors.error_from_body(listed, status=400), InvalidRequestError)
    html = errors.error_from_response(502, b"<html>Bad Gateway</html>")
    assert isinstance(html, ServerError) and "Bad Gateway" in str(html)


def test_secrets_are_redacted_from_error_messages() -> None:
    body = {
        "error": {
            "code": 400,
            "message": "key AIzaSySecretKey0123456789abcdefghijklm is bad",
            "status": "INVALID_ARGUMENT",
        }
    }
    error = errors.error_from_body(
        body, status=400, secrets=("AIzaSySecretKey0123456789abcdefghijklm",)
    )
    assert "AIzaSySecretKey" not in str(error) and "AIzaSySecretKey" not in json.dumps(
        error.to_dict()
    )


def test_prices_tiered_by_prompt_length_batch_and_tiers() -> None:
    usage = Usage(requests=1, input_tokens=1_000_000, output_tokens=1_000_000, cached_tokens=0)
    short = prices.priced(usage.model_copy(update={"input_tokens": 100_000}), "gemini-2.5-pro")
    long = prices.priced(usage.model_copy(update={"input_tokens": 300_000}), "gemini-2.5-pro")
    assert short.cost is not None and long.cost is not None
    assert short.cost.output == pytest.approx(10.0) and long.cost.output == pytest.approx(15.0)
    standard = prices.priced(usage, FLASH).cost
    flex = prices.priced(usage, FLASH, tier="flex").cost
    batch = prices.priced(usage, FLASH, batch=True).cost
    priority = prices.priced(usage, FLASH, tier="priority").cost
    assert standard and flex and batch and priority
    assert flex.total == pytest.approx(standard.total / 2) and batch.total == pytest.approx(
        standard.total / 2
    )
    assert priority.total == pytest.approx(standard.total * prices.PRIORITY_MULTIPLIER)
    cached = prices.priced(usage.model_copy(update={"cached_tokens": 1_000_000}), FLASH).cost
    assert cached is not None and cached.input == 0 and cached.cached_input == pytest.approx(0.03)
    assert prices.priced(usage, "models/" + FLASH).cost == standard  # a resource name
    assert prices.priced(usage, "not-a-model").cost is None

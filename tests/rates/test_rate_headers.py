"""Reading the providers' rate-limit headers: OpenAI's `x-ratelimit-*` (resets as
durations), Anthropic's `anthropic-ratelimit-*` (resets as RFC 3339 times), and
`retry-after` (seconds, an HTTP date, OpenAI's `retry-after-ms`); on a reply and on a
429's error, through the simulator over real HTTP."""

from __future__ import annotations

import email.utils

import anthropic
import httpx
import openai
import pytest
from rates_support import make_model

from raygent import RateReading, UserMessage
from raygent.errors import RateLimitError
from raygent.rates import Window, rate_headers, read_rate_headers
from raygent.sim import Fault, Reply, Rule, serve

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z

OPENAI = {
    "x-ratelimit-limit-requests": "5000",
    "x-ratelimit-limit-tokens": "160000",
    "x-ratelimit-remaining-requests": "4999",
    "x-ratelimit-remaining-tokens": "159976",
    "x-ratelimit-reset-requests": "12ms",
    "x-ratelimit-reset-tokens": "6m0s",
}
ANTHROPIC = {
    "anthropic-ratelimit-requests-limit": "50",
    "anthropic-ratelimit-requests-remaining": "49",
    "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:01Z",
    "anthropic-ratelimit-tokens-limit": "90000",
    "anthropic-ratelimit-tokens-remaining": "89000",
    "anthropic-ratelimit-tokens-reset": "2026-01-01T00:00:02.5Z",
    "anthropic-ratelimit-input-tokens-limit": "80000",
    "anthropic-ratelimit-input-tokens-remaining": "79500",
    "anthropic-ratelimit-input-tokens-reset": "2026-01-01T01:00:00+01:00",
    "anthropic-ratelimit-output-tokens-limit": "16000",
    "anthropic-ratelimit-output-tokens-remaining": "0",
    "anthropic-ratelimit-output-tokens-reset": "2026-01-01T00:00:03Z",
    "retry-after": "3",
}


def test_openai_headers() -> None:
    reading = read_rate_headers(OPENAI, NOW)
    assert reading is not None
    assert reading.requests == Window(limit=5000, remaining=4999, reset=0.012)
    assert reading.tokens == Window(limit=160_000, remaining=159_976, reset=360)
    assert reading.input_tokens is None and reading.output_tokens is None
    assert reading.retry_after is None
    limit = reading.limit()
    assert limit is not None and limit.per_minute == (5000, 160_000, None, None)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("20ms", 0.02),
        ("1h2m3.5s", 3723.5),
        ("0s", 0.0),
        ("2.5", 2.5),  # plain seconds
        ("soon", None),
        ("", None),
    ],
)
def test_openai_reset_durations(value: str, seconds: float | None) -> None:
    reading = read_rate_headers({"x-ratelimit-reset-requests": value}, NOW)
    if seconds is None:
        assert reading is None
    else:
        assert reading is not None and reading.requests is not None
        assert reading.requests.reset == pytest.approx(seconds)


def test_anthropic_headers() -> None:
    reading = read_rate_headers(ANTHROPIC, NOW)
    assert reading is not None
    assert reading.requests == Window(limit=50, remaining=49, reset=1.0)
    # `tokens-*` is the most restrictive of the input and output limits, not a limit
    # of all tokens: held as one, it would keep every unused `max_tokens` counted.
    assert reading.tokens is None
    assert reading.input_tokens == Window(limit=80_000, remaining=79_500, reset=0.0)
    assert reading.output_tokens == Window(limit=16_000, remaining=0, reset=3.0)
    assert reading.retry_after == 3.0
    limit = reading.limit()
    assert limit is not None and limit.per_minute == (50, None, 80_000, 16_000)
    # Alone (a proxy stating only it), it is all there is to go by.
    alone = {k: v for k, v in ANTHROPIC.items() if "input" not in k and "output" not in k}
    only = read_rate_headers(alone, NOW)
    assert only is not None and only.tokens == Window(limit=90_000, remaining=89_000, reset=2.5)


def test_a_reset_in_the_past_is_now_and_garbage_is_ignored() -> None:
    reading = read_rate_headers(
        {
            "anthropic-ratelimit-requests-reset": "2025-12-31T23:59:00Z",
            "anthropic-ratelimit-requests-limit": "many",
            "anthropic-ratelimit-tokens-remaining": "-3",
            "anthropic-ratelimit-tokens-reset": "2026-01-01T00:00:09",  # no zone: unknown
        },
        NOW,
    )
    assert reading is not None
    assert reading.requests == Window(reset=0.0)
    assert reading.tokens is None
    assert read_rate_headers({"content-type": "application/json"}, NOW) is None
    assert read_rate_headers({"x-ratelimit-limit-requests": "inf"}, NOW) is None


def _sdk_retry_after(headers: dict[str, str]) -> float | None:
    """What the official SDKs wait for these headers (their own parser)."""
    client = openai.OpenAI(api_key="sk-x", base_url="http://127.0.0.1:9")
    ours = client._parse_retry_after_header(httpx.Headers(headers))
    theirs = anthropic.Anthropic(api_key="sk-x", base_url="http://127.0.0.1:9")
    assert theirs._parse_retry_after_header(httpx.Headers(headers)) == ours
    client.close()
    theirs.close()
    return ours


@pytest.mark.parametrize(
    "headers",
    [
        {"retry-after": "3"},
        {"retry-after": "0.5"},
        {"retry-after-ms": "1500"},
        {"retry-after-ms": "250", "retry-after": "9"},
        {"retry-after": "never"},
    ],
)
def test_retry_after_as_the_sdks_read_it(headers: dict[str, str]) -> None:
    reading = read_rate_headers(headers, NOW)
    sdk = _sdk_retry_after(headers)
    if sdk is None:
        assert reading is None
    else:
        assert reading is not None and reading.retry_after == pytest.approx(sdk)


def test_retry_after_as_an_http_date() -> None:
    when = email.utils.formatdate(NOW + 7, usegmt=True)
    reading = read_rate_headers({"retry-after": when}, NOW)
    assert reading is not None and reading.retry_after == pytest.approx(7)


def test_rate_headers_picks_them_out_of_a_reply_case_blind() -> None:
    headers = httpx.Headers({"X-RateLimit-Limit-Requests": "60", "Content-Type": "text/json"})
    assert rate_headers(headers.multi_items()) == {"x-ratelimit-limit-requests": "60"}


def test_a_reading_is_left_out_of_json_where_unsaid() -> None:
    reading = RateReading(requests=Window(limit=60), retry_after=None)
    assert reading.model_dump(mode="json") == {
        "requests": {"limit": 60.0, "remaining": None, "reset": None}
    }
    with pytest.raises(ValueError):
        RateReading()


HEADERS_429 = {
    "openai": {"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "0"},
    "anthropic": {
        "anthropic-ratelimit-requests-limit": "60",
        "anthropic-ratelimit-requests-remaining": "0",
    },
}


async def test_a_429_carries_its_reading_on_each_wire(provider: str) -> None:
    headers = HEADERS_429["anthropic" if provider == "anthropic" else "openai"]
    fault = Fault(kind="status", status=429, retry_after=2, headers=headers)
    async with serve([Rule(reply=Reply(text="x", fault=fault))]) as sim:
        model = make_model(provider, sim)
        with pytest.raises(RateLimitError) as caught:
            await model.complete([UserMessage(content="hi")])
    rate = RateReading.model_validate(caught.value.details["rate"])
    assert rate.requests == Window(limit=60, remaining=0)
    assert rate.retry_after == 2.0 == caught.value.retry_after


async def test_a_reply_without_rate_headers_has_no_reading(provider: str) -> None:
    async with serve([Rule(reply=Reply(text="hello"))]) as sim:
        model = make_model(provider, sim)
        response = await model.complete([UserMessage(content="hi")])
    assert response.rate is None
    assert "rate" not in response.model_dump(mode="json")

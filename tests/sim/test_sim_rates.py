"""Rate limits over real HTTP, through the official SDKs: the headers on every reply
(success, stream, 429, both wires and the Responses API), 429s past a limit with the
provider's body and ``retry-after``, tokens counted as providers count them for
admission, per-key isolation, settlement of output tokens and a refill."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import anthropic
import httpx
import openai
import pytest
from sim_helpers import USER, Clients, wait_for

from raygent.sim import Fault, Reply, Rule, Script, SimRateLimits, serve

OPENAI_NAMES = [
    f"x-ratelimit-{what}-{kind}"
    for kind in ("requests", "tokens")
    for what in ("limit", "remaining", "reset")
]
ANTHROPIC_NAMES = [
    f"anthropic-ratelimit-{kind}-{what}"
    for kind in ("requests", "tokens", "input-tokens", "output-tokens")
    for what in ("limit", "remaining", "reset")
]
DURATION = re.compile(r"(\d+h)?(\d+m)?(\d+(\.\d+)?s|\d+ms)")
BOTH = SimRateLimits(
    requests_per_minute=600,
    tokens_per_minute=600_000,
    input_tokens_per_minute=600_000,
    output_tokens_per_minute=12_000,
)


def check_openai_headers(headers: httpx.Headers, rpm: int, tpm: int) -> None:
    assert headers["x-ratelimit-limit-requests"] == str(rpm)
    assert headers["x-ratelimit-limit-tokens"] == str(tpm)
    assert 0 <= int(headers["x-ratelimit-remaining-requests"]) <= rpm
    assert 0 <= int(headers["x-ratelimit-remaining-tokens"]) <= tpm
    for kind in ("requests", "tokens"):
        assert DURATION.fullmatch(headers[f"x-ratelimit-reset-{kind}"])
    assert not any(name.startswith("anthropic-ratelimit") for name in headers)


def check_anthropic_headers(headers: httpx.Headers) -> None:
    now = datetime.now(timezone.utc)
    for name in ANTHROPIC_NAMES:
        value = headers[name]
        if name.endswith("-reset"):
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", value)
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
            assert now - timedelta(seconds=2) <= moment <= now + timedelta(seconds=120)
        else:
            assert int(value) >= 0
    assert headers["anthropic-ratelimit-input-tokens-limit"] == "600000"
    assert headers["anthropic-ratelimit-output-tokens-limit"] == "12000"
    assert not any(name.startswith("x-ratelimit") for name in headers)


async def test_headers_on_replies_and_streams_of_both_wires(clients: Clients) -> None:
    async with serve(rate_limits=BOTH) as sim:
        oa, an = clients.openai(sim), clients.anthropic(sim)
        chat = await oa.chat.completions.with_raw_response.create(model="m", messages=USER)
        streamed = await oa.chat.completions.with_raw_response.create(
            model="m", messages=USER, stream=True
        )
        async for _ in streamed.parse():
            pass
        responses = await oa.responses.with_raw_response.create(model="m", input="hi")
        message = await an.messages.with_raw_response.create(
            model="c", max_tokens=50, messages=USER
        )
        a_stream = await an.messages.with_raw_response.create(
            model="c", max_tokens=50, messages=USER, stream=True
        )
        async for _ in await a_stream.parse():
            pass
        # A request over the output limit is refused on either wire, headers and all.
        with pytest.raises(openai.RateLimitError) as o429:
            await oa.chat.completions.create(model="m", messages=USER, max_tokens=20_000)
        with pytest.raises(anthropic.RateLimitError) as a429:
            await an.messages.create(model="c", max_tokens=20_000, messages=USER)
    for headers in (chat.headers, streamed.headers, responses.headers, o429.value.response.headers):
        check_openai_headers(headers, 600, 600_000)
    for headers in (message.headers, a_stream.headers, a429.value.response.headers):
        check_anthropic_headers(headers)
    assert o429.value.code == "rate_limit_exceeded"
    # Each request takes one from the same key's bucket of 10 (model "m" and "c" apart).
    assert chat.headers["x-ratelimit-remaining-requests"] == "9"
    assert streamed.headers["x-ratelimit-remaining-requests"] == "8"
    assert message.headers["anthropic-ratelimit-requests-remaining"] == "9"


async def test_no_rate_headers_without_limits(clients: Clients) -> None:
    async with serve() as sim:
        raw = await clients.openai(sim).chat.completions.with_raw_response.create(
            model="m", messages=USER
        )
        an = await clients.anthropic(sim).messages.with_raw_response.create(
            model="c", max_tokens=5, messages=USER
        )
    for headers in (raw.headers, an.headers):
        assert not any("ratelimit" in name for name in headers)


async def test_a_burst_past_the_limit_gets_429s(clients: Clients) -> None:
    # 6 a minute with a 50 s burst: five at once, then one every 10 s.
    limits = SimRateLimits(requests_per_minute=6, burst_seconds=50)
    async with serve(rate_limits=limits) as sim:
        oa = clients.openai(sim)
        burst = await asyncio.gather(
            *(
                oa.chat.completions.with_raw_response.create(model="m", messages=USER)
                for _ in range(5)
            )
        )
        with pytest.raises(openai.RateLimitError) as caught:
            await oa.chat.completions.create(model="m", messages=USER)
        stats = sim.stats()
    assert sorted(r.headers["x-ratelimit-remaining-requests"] for r in burst) == list("01234")
    error = caught.value
    headers = error.response.headers
    assert 9 <= int(headers["retry-after"]) <= 10
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert "x-ratelimit-limit-tokens" not in headers  # no token limit set
    body: Any = error.body
    assert body["type"] == "requests" and body["code"] == "rate_limit_exceeded"
    assert body["param"] is None
    assert body["message"].startswith(
        "Rate limit reached for m in organization org-sim on requests per min (RPM): "
        "Limit 6, Requested 1. Please try again in "
    )
    assert stats.by_status == {200: 5, 429: 1}
    assert stats.rate_limited == {"requests": 1}
    assert (stats.admitted_requests, stats.peak_requests_per_second) == (5, 5)


async def test_anthropic_429_body_and_retry_after(clients: Clients) -> None:
    limits = SimRateLimits(requests_per_minute=6, burst_seconds=10)  # one, then 10 s
    async with serve(rate_limits=limits) as sim:
        an = clients.anthropic(sim)
        await an.messages.create(model="c", max_tokens=5, messages=USER)
        with pytest.raises(anthropic.RateLimitError) as caught:
            await an.messages.create(model="c", max_tokens=5, messages=USER)
    headers = caught.value.response.headers
    assert 9 <= int(headers["retry-after"]) <= 10
    assert headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert "anthropic-ratelimit-tokens-limit" not in headers
    body: Any = caught.value.body
    assert body["type"] == "error"
    assert body["error"]["type"] == "rate_limit_error"
    assert "rate limit of 6 requests per minute" in body["error"]["message"]
    assert body["request_id"] == headers["request-id"]


async def test_tokens_counted_as_openai_counts_them_at_admission(clients: Clients) -> None:
    # A bucket of 100,000 tokens refilling 1 a minute: the remaining count shows each charge.
    limits = SimRateLimits(tokens_per_minute=1, burst_seconds=6_000_000)
    long_prompt = [{"role": "user", "content": "w" * 400}]
    async with serve(rate_limits=limits) as sim:
        oa = clients.openai(sim)
        remaining = [100_000]

        async def charged(raw: Any) -> int:
            now = int(raw.headers["x-ratelimit-remaining-tokens"])
            spent, remaining[0] = remaining[0] - now, now
            return spent

        raw = await oa.chat.completions.with_raw_response.create(
            model="m", messages=long_prompt, max_tokens=300
        )
        prompt = raw.parse().usage.prompt_tokens
        assert await charged(raw) == prompt + 300
        raw = await oa.chat.completions.with_raw_response.create(
            model="m", messages=long_prompt, max_completion_tokens=70
        )
        assert await charged(raw) == prompt + 70
        raw = await oa.chat.completions.with_raw_response.create(model="m", messages=long_prompt)
        assert await charged(raw) == prompt  # no max_tokens: the prompt only
        raw = await oa.responses.with_raw_response.create(
            model="m", input="w" * 400, max_output_tokens=40
        )
        assert await charged(raw) == raw.parse().usage.input_tokens + 40
        stats = sim.stats()
    assert stats.admitted_output_tokens == 300 + 70 + 40
    assert stats.admitted_tokens == stats.admitted_input_tokens + 410


async def test_request_larger_than_the_limit_never_fits(clients: Clients) -> None:
    async with serve(rate_limits=SimRateLimits(tokens_per_minute=1000)) as sim:
        with pytest.raises(openai.RateLimitError) as caught:
            await clients.openai(sim).chat.completions.create(
                model="m", messages=USER, max_tokens=2000
            )
        stats = sim.stats()
    headers = caught.value.response.headers
    assert "retry-after" not in headers and headers["x-should-retry"] == "false"
    body: Any = caught.value.body
    assert body["type"] == "tokens"
    assert body["message"].startswith("Request too large for m in organization org-sim")
    assert stats.rate_limited == {"tokens": 1}


async def test_output_tokens_charged_at_admission_and_settled_at_the_end(
    clients: Clients,
) -> None:
    # OTPM bucket of 100 refilling 1 a second; the reply is 2 tokens long.
    limits = SimRateLimits(output_tokens_per_minute=60, burst_seconds=100)
    slow = Script(rules=[Rule(reply=Reply(text="tiny", latency_ms=2000))])
    async with serve(slow, rate_limits=limits) as sim:
        an = clients.anthropic(sim)
        first = asyncio.create_task(an.messages.create(model="c", max_tokens=100, messages=USER))
        await wait_for(sim, lambda s: s.in_flight == 1)
        with pytest.raises(anthropic.RateLimitError) as caught:  # 100 charged, none left
            await an.messages.create(model="c", max_tokens=50, messages=USER)
        reply = await first
        # The reply used 1 of the 100 charged: 99 came back when it ended.
        await an.messages.create(model="c", max_tokens=90, messages=USER)
        stats = sim.stats()
    assert reply.usage.output_tokens == 1
    body: Any = caught.value.body
    assert "100 output tokens per minute" not in body["error"]["message"]
    assert "60 output tokens per minute" in body["error"]["message"]
    assert stats.rate_limited == {"output_tokens": 1}
    assert stats.admitted_output_tokens == 190


async def test_input_tokens_read_from_the_prompt_cache_are_not_charged(
    clients: Clients,
) -> None:
    # An ITPM bucket of 1,500 refilling 1 a second; the system prompt is 1,004 tokens.
    limits = SimRateLimits(input_tokens_per_minute=60, burst_seconds=1500)
    cached = [{"type": "text", "text": "s" * 4000, "cache_control": {"type": "ephemeral"}}]
    other = [{"type": "text", "text": "t" * 4000}]
    async with serve(rate_limits=limits) as sim:
        an = clients.anthropic(sim)
        write = await an.messages.create(model="c", max_tokens=5, system=cached, messages=USER)
        read = await an.messages.create(model="c", max_tokens=5, system=cached, messages=USER)
        with pytest.raises(anthropic.RateLimitError):
            await an.messages.create(model="c", max_tokens=5, system=other, messages=USER)
        stats = sim.stats()
    assert write.usage.cache_creation_input_tokens == 1004
    assert read.usage.cache_read_input_tokens == 1004
    assert stats.rate_limited == {"input_tokens": 1}


async def test_limits_are_held_per_api_key_and_model(clients: Clients) -> None:
    async with serve(rate_limits=SimRateLimits(requests_per_minute=1)) as sim:
        alice = clients.openai(sim, api_key="sk-alice")
        bob = clients.openai(sim, api_key="sk-bob")
        await alice.chat.completions.create(model="m", messages=USER)
        with pytest.raises(openai.RateLimitError):
            await alice.chat.completions.create(model="m", messages=USER)
        await bob.chat.completions.create(model="m", messages=USER)
        await alice.chat.completions.create(model="other", messages=USER)
        an_alice = clients.anthropic(sim, api_key="sk-alice")
        with pytest.raises(anthropic.RateLimitError):  # the same key and model, any wire
            await an_alice.messages.create(model="m", max_tokens=5, messages=USER)
        await clients.anthropic(sim, api_key="sk-carol").messages.create(
            model="m", max_tokens=5, messages=USER
        )
    async with serve(rate_limits=SimRateLimits(requests_per_minute=1, per_model=False)) as sim:
        alice = clients.openai(sim, api_key="sk-alice")
        await alice.chat.completions.create(model="m", messages=USER)
        with pytest.raises(openai.RateLimitError):
            await alice.chat.completions.create(model="other", messages=USER)


async def test_concurrency_429_carries_the_headers_and_costs_nothing(clients: Clients) -> None:
    hang = Script(rules=[Rule(reply=Reply(fault=Fault(kind="hang")))])
    limits = SimRateLimits(requests_per_minute=60, burst_seconds=10)
    async with serve(hang, rate_limits=limits, max_concurrency=1) as sim:
        http = clients.http(sim, timeout=30)
        body = {"model": "m", "messages": USER}
        stuck = asyncio.create_task(http.post("/v1/chat/completions", json=body))
        await wait_for(sim, lambda s: s.in_flight == 1)
        over = await http.post("/v1/chat/completions", json=body)
        stuck.cancel()
        await asyncio.gather(stuck, return_exceptions=True)
        stats = await wait_for(sim, lambda s: s.in_flight == 0)
    assert over.status_code == 429
    assert over.headers["retry-after"] == "1"
    assert over.headers["x-ratelimit-remaining-requests"] == "9"  # refunded: only one taken
    assert over.json()["error"]["code"] == "rate_limit_exceeded"
    assert stats.rate_limited == {"concurrency": 1}
    assert stats.admitted_requests == 1


async def test_the_bucket_refills(clients: Clients) -> None:
    # 600 a minute, a bucket of 10: once it is empty, the next fits about 0.1 s later.
    async with serve(rate_limits=SimRateLimits(requests_per_minute=600)) as sim:
        oa = clients.openai(sim)
        refused = []
        for _ in range(500):  # poll, a few ms apart, until the refill admits a request
            try:
                await oa.chat.completions.create(model="m", messages=USER)
            except openai.RateLimitError as exc:
                refused.append(exc.response.headers["retry-after"])
                await asyncio.sleep(0.005)
                continue
            if refused:
                break
        stats = sim.stats()
    assert refused and set(refused) == {"1"}
    assert stats.rate_limited == {"requests": len(refused)}
    assert stats.admitted_requests >= 11
    assert stats.peak_requests_per_second <= 10 + 10  # a full bucket plus a second's refill


async def test_reset_refills_every_bucket(clients: Clients) -> None:
    async with serve(rate_limits=SimRateLimits(requests_per_minute=1)) as sim:
        oa = clients.openai(sim)
        await oa.chat.completions.create(model="m", messages=USER)
        with pytest.raises(openai.RateLimitError):
            await oa.chat.completions.create(model="m", messages=USER)
        sim.reset()
        await oa.chat.completions.create(model="m", messages=USER)
        stats = sim.stats()
    assert (stats.admitted_requests, stats.rate_limited) == (1, {})


async def test_a_prompt_over_the_context_window_is_charged_nothing(clients: Clients) -> None:
    limits = SimRateLimits(requests_per_minute=1)
    async with serve(rate_limits=limits, context_window=50) as sim:
        oa = clients.openai(sim)
        with pytest.raises(openai.BadRequestError):
            await oa.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "z" * 400}]
            )
        await oa.chat.completions.create(model="m", messages=USER)

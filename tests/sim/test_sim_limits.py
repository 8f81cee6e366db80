"""Latency, the concurrency cap, requests per minute, the context window and API keys."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import anthropic
import httpx
import openai
import pytest
from sim_helpers import USER, Clients, wait_for

from raygent.sim import Fault, Latency, Reply, Rule, Script, SimRateLimits, serve

BODY = {"model": "m", "max_tokens": 100, "messages": USER}


async def test_fixed_latency_is_a_lower_bound(clients: Clients) -> None:
    async with serve(latency=Latency(fixed_ms=150)) as sim:
        http = clients.http(sim)
        start = time.monotonic()
        resp = await http.post("/v1/chat/completions", json=BODY)
        assert resp.status_code == 200
        assert time.monotonic() - start >= 0.15


async def test_per_token_latency_spreads_over_stream_chunks(clients: Clients) -> None:
    script = Script(rules=[Rule(reply=Reply(text="w" * 160))])  # 40 tokens, 10 chunks
    async with serve(script, latency=Latency(per_token_ms=5)) as sim:
        http = clients.http(sim)
        arrivals = []
        start = time.monotonic()
        async with http.stream("POST", "/v1/messages", json={**BODY, "stream": True}) as resp:
            async for line in resp.aiter_lines():
                if "text_delta" in line:
                    arrivals.append(time.monotonic() - start)
    assert len(arrivals) == 10
    assert arrivals[-1] >= 0.2
    assert arrivals[0] < arrivals[-1]


async def test_reply_latency_override(clients: Clients) -> None:
    script = Script(rules=[Rule(reply=Reply(text="slow", latency_ms=120))])
    async with serve(script) as sim:
        start = time.monotonic()
        await clients.http(sim).post("/v1/chat/completions", json=BODY)
        assert time.monotonic() - start >= 0.12


async def test_jitter_is_seeded() -> None:
    from raygent.sim._config import SimConfig
    from raygent.sim._script import Script as S
    from raygent.sim._server import SimCore

    def draws(seed: int) -> list[float]:
        core = SimCore(S(), SimConfig(latency=Latency(jitter_ms=100, seed=seed)))
        return [core._latency_rng.uniform(0, 100) for _ in range(5)]

    assert draws(1) == draws(1) != draws(2)


async def test_concurrency_cap(clients: Clients) -> None:
    cap, extra = 3, 4
    hang = Script(rules=[Rule(reply=Reply(fault=Fault(kind="hang")))])
    async with serve(hang, max_concurrency=cap, retry_after=2.5) as sim:
        http = clients.http(sim, timeout=30)
        tasks = [
            asyncio.create_task(http.post("/v1/chat/completions", json=BODY))
            for _ in range(cap + extra)
        ]
        done: set[asyncio.Task[httpx.Response]] = set()
        pending = set(tasks)
        while len(done) < extra:
            finished, pending = await asyncio.wait(
                pending, timeout=5, return_when=asyncio.FIRST_COMPLETED
            )
            assert finished, "no response within 5 s"
            done |= finished
        stats = await wait_for(sim, lambda s: s.in_flight == cap)
        assert len(done) == extra and stats.by_status == {429: extra}
        assert stats.rate_limited == {"concurrency": extra}
        assert not any("ratelimit" in name for task in done for name in task.result().headers)
        for task in done:
            resp = task.result()
            assert resp.status_code == 429
            assert resp.headers["retry-after"] == "2.5"
            assert resp.json()["error"]["code"] == "rate_limit_exceeded"
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        stats = await wait_for(sim, lambda s: s.in_flight == 0)
    assert stats.peak_in_flight == cap
    assert stats.disconnects == cap


async def test_concurrency_cap_with_sdks(clients: Clients) -> None:
    slow = Script(rules=[Rule(reply=Reply(text="ok", latency_ms=300))])
    async with serve(slow, max_concurrency=1) as sim:
        oa, an = clients.openai(sim), clients.anthropic(sim)
        first = asyncio.create_task(oa.chat.completions.create(model="m", messages=USER))
        await wait_for(sim, lambda s: s.in_flight == 1)
        with pytest.raises(openai.RateLimitError):
            await oa.chat.completions.create(model="m", messages=USER)
        with pytest.raises(anthropic.RateLimitError) as caught:
            await an.messages.create(model="c", max_tokens=5, messages=USER)
        assert caught.value.response.headers["retry-after"] == "1"
        await first


async def test_requests_per_minute(clients: Clients) -> None:
    # 6 a minute with a 20 s burst: the bucket holds two, the third waits ~10 s.
    async with serve(requests_per_minute=6, rate_limits=SimRateLimits(burst_seconds=20)) as sim:
        http = clients.http(sim)
        statuses = [(await http.post("/v1/messages", json=BODY)).status_code for _ in range(2)]
        over = await http.post("/v1/messages", json=BODY)
    assert statuses == [200, 200]
    assert over.status_code == 429
    assert 9 <= int(over.headers["retry-after"]) <= 10
    assert over.json()["error"]["type"] == "rate_limit_error"


async def test_context_window(clients: Clients) -> None:
    long = [{"role": "user", "content": "z" * 400}]
    async with serve(context_window=50) as sim:
        oa, an = clients.openai(sim), clients.anthropic(sim)
        await oa.chat.completions.create(model="m", messages=USER)
        with pytest.raises(openai.BadRequestError) as o_err:
            await oa.chat.completions.create(model="m", messages=long)
        with pytest.raises(anthropic.BadRequestError) as a_err:
            await an.messages.create(model="c", max_tokens=5, messages=long)
    assert o_err.value.code == "context_length_exceeded"
    assert "maximum context length is 50 tokens" in o_err.value.message
    assert "resulted in 104 tokens" in o_err.value.message
    body: Any = a_err.value.body
    assert body["error"] == {
        "type": "invalid_request_error",
        "message": "prompt is too long: 104 tokens > 50 maximum",
    }


async def test_api_key_checked_and_never_recorded(clients: Clients) -> None:
    key = "sk-correct-horse"
    async with serve(api_key=key) as sim:
        with pytest.raises(openai.AuthenticationError) as o_err:
            await clients.openai(sim).chat.completions.create(model="m", messages=USER)
        with pytest.raises(anthropic.AuthenticationError) as a_err:
            await clients.anthropic(sim).messages.create(model="c", max_tokens=5, messages=USER)
        ok_oa = clients.openai(sim, api_key=key)
        ok_an = clients.anthropic(sim, api_key=key)
        await ok_oa.chat.completions.create(model="m", messages=USER)
        await ok_an.messages.create(model="c", max_tokens=5, messages=USER)
        http = clients.http(sim)
        raw = await http.post("/v1/messages", json=BODY, headers={"x-api-key": key})
        assert raw.status_code == 200
        records = sim.requests
        stats = sim.stats()
    assert o_err.value.code == "invalid_api_key"
    body: Any = a_err.value.body
    assert body["error"]["type"] == "authentication_error"
    assert stats.by_status == {401: 2, 200: 3}
    assert len(records) == 5
    for record in records:
        dumped = repr(record)
        assert key not in dumped and "sk-test" not in dumped and "sk-ant-test" not in dumped
    assert records[0].headers["authorization"] == "[redacted]"
    assert records[4].headers["x-api-key"] == "[redacted]"
    assert records[0].body["messages"] == USER


async def test_requests_are_bounded() -> None:
    async with serve() as sim, httpx.AsyncClient(base_url=sim.url) as http:
        for _ in range(3):
            await http.post("/v1/chat/completions", json=BODY)
        assert [r.api for r in sim.requests] == ["openai"] * 3
        sim.reset()
        assert sim.requests == []
        assert sim.stats().requests == 0

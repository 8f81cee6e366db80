"""Disconnect counting, shutdown, the sync API, helper endpoints and malformed requests."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import openai
import pytest
from sim_helpers import USER, Clients, wait_for

from raygent.sim import Fault, Latency, Reply, Rule, Script, SimStats, serve

BODY = {"model": "m", "max_tokens": 500, "messages": USER}
SLOW_STREAM = Script(rules=[Rule(reply=Reply(text="tick " * 200))])
HANG = Script(rules=[Rule(reply=Reply(fault=Fault(kind="hang")))])


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
async def test_disconnect_mid_stream(clients: Clients, path: str) -> None:
    async with serve(SLOW_STREAM, latency=Latency(per_token_ms=2)) as sim:
        http = clients.http(sim)
        async with http.stream("POST", path, json={**BODY, "stream": True}) as resp:
            async for line in resp.aiter_lines():
                if "tick" in line:
                    break  # leaving the block closes the connection mid-stream
        stats = await wait_for(sim, lambda s: s.disconnects == 1 and s.in_flight == 0)
    assert stats.streams == 1 and stats.by_status == {}


async def test_disconnect_during_hang_and_latency(clients: Clients) -> None:
    script = Script(rules=[Rule(reply=Reply(text="late", latency_ms=60_000))])
    for source in (HANG, script):
        async with serve(source) as sim:
            http = clients.http(sim)
            task = asyncio.create_task(http.post("/v1/chat/completions", json=BODY))
            await wait_for(sim, lambda s: s.in_flight == 1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            stats = await wait_for(sim, lambda s: s.disconnects == 1 and s.in_flight == 0)
        assert stats.by_status == {}


async def test_shutdown_is_prompt_with_hanging_requests() -> None:
    sim = serve(HANG)
    await sim.astart()
    async with httpx.AsyncClient(base_url=sim.url, timeout=30) as http:
        tasks = [asyncio.create_task(http.post("/v1/messages", json=BODY)) for _ in range(3)]
        await wait_for(sim, lambda s: s.in_flight == 3)
        start = time.monotonic()
        await sim.astop()
        assert time.monotonic() - start < 1.0
        results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, httpx.TransportError) for r in results)
    assert sim.stats().disconnects == 0  # the server left, not the clients


def test_sync_context_manager_and_sync_client() -> None:
    with serve() as sim:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)
        with client:
            result = client.chat.completions.create(model="m", messages=USER)
        assert result.choices[0].message.content == "Simulated reply to: Hello there, simulator!"
        assert sim.stats().by_api == {"openai": 1}


async def test_blocked_caller_loop_is_still_served() -> None:
    async with serve() as sim:
        # The sync client blocks this loop; the simulator's own loop still answers.
        with openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0) as client:
            result = client.chat.completions.create(model="m", messages=USER)
    assert result.choices


def test_stats_from_other_threads() -> None:
    with serve() as sim, httpx.Client(base_url=sim.url) as http:
        seen: list[SimStats] = []

        def poll() -> None:
            for _ in range(200):
                seen.append(sim.stats())

        poller = threading.Thread(target=poll)
        poller.start()
        for _ in range(20):
            http.post("/v1/chat/completions", json=BODY)
        poller.join()
        assert sim.stats().requests == 20
        assert all(s.requests <= 20 for s in seen)


async def test_stats_reset_and_health_endpoints(clients: Clients) -> None:
    async with serve() as sim:
        http = clients.http(sim)
        await http.post("/v1/chat/completions", json={**BODY, "stream": True})
        await http.post("/v1/messages", json=BODY)
        stats = SimStats.model_validate_json((await http.get("/sim/stats")).content)
        assert stats == sim.stats()
        assert (stats.requests, stats.streams, stats.by_status) == (2, 1, {200: 2})
        assert stats.by_api == {"openai": 1, "anthropic": 1}
        assert stats.peak_in_flight == 1
        assert (await http.post("/sim/reset")).json() == {"ok": True}
        assert sim.stats() == SimStats()
        assert (await http.get("/health")).json() == {"status": "ok"}


@pytest.mark.parametrize(
    ("path", "content", "status", "message"),
    [
        ("/v1/chat/completions", b"{not json", 400, "could not parse the JSON body"),
        ("/v1/chat/completions", b'{"messages": []}', 400, "must provide a model"),
        ("/v1/chat/completions", b'{"model": "m"}', 400, "'messages'"),
        ("/v1/messages", b"[1, 2", 400, "error parsing the body"),
        ("/v1/messages", b'{"model": "c", "messages": []}', 400, "max_tokens: Field required"),
        ("/v1/messages", b'{"max_tokens": 5, "messages": []}', 400, "model: Field required"),
        ("/v1/embeddings", b"{}", 404, "Invalid URL (POST /v1/embeddings)"),
        ("/v1/messages/nope", b"{}", 404, "Not found"),
    ],
)
async def test_malformed_requests(
    clients: Clients, path: str, content: bytes, status: int, message: str
) -> None:
    async with serve() as sim:
        resp = await clients.http(sim).post(path, content=content)
        stats = sim.stats()
    assert resp.status_code == status
    body: Any = resp.json()
    if "messages" in path:
        assert body["type"] == "error"
        assert body["error"]["type"] == (
            "not_found_error" if status == 404 else "invalid_request_error"
        )
        assert message in body["error"]["message"]
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"}
        assert message in body["error"]["message"]
    assert stats.by_status == {status: 1} and stats.in_flight == 0


def test_a_taken_port_fails_to_start() -> None:
    with serve() as sim, pytest.raises(OSError), serve(port=sim.port):
        pass

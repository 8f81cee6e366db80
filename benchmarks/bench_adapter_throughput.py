"""Requests/s of the model adapters at 64 in flight, against a bare aiohttp loop.

The simulator runs in its own process with a fixed latency; each client keeps exactly
`--inflight` requests open until `--requests` are done. Rounds are interleaved so that
machine noise hits every client alike; the median round is reported, with the CPU time
each request cost the client process. The figures that matter are the ratio of each
adapter (complete and stream, every wire: OpenAI, Responses, Anthropic, Gemini, Bedrock)
to the hand-written aiohttp loop posting the same body to the same endpoint, measured in
the same run (target >= 0.95), and the CPU each request costs beside the loop's.
Bedrock's loop signs each request with botocore's SigV4, as the adapter does (the
simulator checks every signature's form). Each adapter call carries an abort signal, as
an agent's calls do. It uses the public API only, so it runs unchanged on older commits
(to compare before and after).

    python benchmarks/bench_adapter_throughput.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import httpx

# The script's own folder is on sys.path when run as `python benchmarks/...`.
from _sim_process import sim_process

from raygent import (
    AbortController,
    AnthropicModel,
    BedrockModel,
    GeminiModel,
    OpenAIModel,
    OpenAIResponsesModel,
    UserMessage,
)

BEDROCK_ID = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
# A key the simulator checks the form of (its own test keys it verifies, costing it CPU).
AWS_KEYS = {"access_key": "AKIABENCH00000000000", "secret_key": "bench-secret"}

MESSAGES = [UserMessage(content="Say something short.")]
TARGET = 0.95
Call = Callable[[], Awaitable[object]]


async def drive(call: Call, total: int, inflight: int) -> tuple[float, float]:
    """(requests/s, CPU ms per request) for `total` calls with `inflight` always open."""
    remaining = total

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await call()

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(inflight)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return total / wall, cpu * 1000 / total


def aiohttp_call(
    session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]
) -> Call:
    async def call() -> object:
        async with session.post(url, data=body, headers=headers) as response:
            response.raise_for_status()
            return json.loads(await response.read())

    return call


def signed_aiohttp_call(session: aiohttp.ClientSession, url: str, body: bytes) -> Call:
    """A hand-written Bedrock loop: each request signed with botocore's SigV4."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    signer = SigV4Auth(
        Credentials(AWS_KEYS["access_key"], AWS_KEYS["secret_key"]), "bedrock", "us-east-1"
    )

    async def call() -> object:
        request = AWSRequest("POST", url, data=body, headers={"content-type": "application/json"})
        signer.add_auth(request)
        async with session.post(url, data=body, headers=dict(request.headers.items())) as response:
            response.raise_for_status()
            return json.loads(await response.read())

    return call


def httpx_call(client: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str]) -> Call:
    async def call() -> object:
        response = await client.post(url, content=body, headers=headers)
        response.raise_for_status()
        return response.json()

    return call


async def run(args: argparse.Namespace, base: str) -> None:
    openai = OpenAIModel("sim-gpt", base_url=base + "/v1", api_key="sk-bench")
    anthropic = AnthropicModel("sim-claude", base_url=base, api_key="sk-ant-bench")
    responses = OpenAIResponsesModel("sim-gpt", base_url=base + "/v1", api_key="sk-bench")
    bedrock = BedrockModel(BEDROCK_ID, region="us-east-1", base_url=base, **AWS_KEYS)  # type: ignore[arg-type]
    bedrock_body = json.dumps(bedrock.request_body(MESSAGES, None, stream=False)).encode()
    bedrock_url = base + bedrock.request_path(stream=False)
    responses_body = json.dumps(responses.request_body(MESSAGES, None, stream=False)).encode()
    openai_body = json.dumps(openai.request_body(MESSAGES, None, stream=False)).encode()
    anthropic_body = json.dumps(anthropic.request_body(MESSAGES, None, stream=False)).encode()
    gemini = GeminiModel("gemini-2.5-flash", base_url=base, api_key="gemini-bench")
    gemini_body = json.dumps(gemini.request_body(MESSAGES, None, stream=False)).encode()
    gemini_url = base + "/v1beta/models/gemini-2.5-flash:generateContent"
    json_headers = {"content-type": "application/json"}
    gemini_headers = {**json_headers, "x-goog-api-key": "gemini-bench"}
    # Every call under an abort signal, as an agent's run makes them (never fired).
    signal = AbortController().signal
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    plain_httpx = httpx.AsyncClient(limits=httpx.Limits(max_connections=None), timeout=60)

    def completing(model: Any) -> Call:
        return lambda: model.complete(MESSAGES, signal=signal)

    def streaming(model: Any) -> Call:
        async def call() -> object:
            return [c async for c in model.stream(MESSAGES, signal=signal)]

        return call

    clients: dict[str, tuple[Call, int]] = {
        "aiohttp loop, OpenAI body (baseline)": (
            aiohttp_call(session, base + "/v1/chat/completions", openai_body, json_headers),
            args.requests,
        ),
        "OpenAIModel.complete": (completing(openai), args.requests),
        "OpenAIModel.stream": (streaming(openai), args.requests),
        "aiohttp loop, Anthropic body (baseline)": (
            aiohttp_call(session, base + "/v1/messages", anthropic_body, json_headers),
            args.requests,
        ),
        "AnthropicModel.complete": (completing(anthropic), args.requests),
        "AnthropicModel.stream": (streaming(anthropic), args.requests),
        "aiohttp loop, Responses body (baseline)": (
            aiohttp_call(session, base + "/v1/responses", responses_body, json_headers),
            args.requests,
        ),
        "OpenAIResponsesModel.complete": (completing(responses), args.requests),
        "OpenAIResponsesModel.stream": (streaming(responses), args.requests),
        "signed aiohttp loop, Bedrock body (baseline)": (
            signed_aiohttp_call(session, bedrock_url, bedrock_body),
            args.requests,
        ),
        "BedrockModel.complete": (completing(bedrock), args.requests),
        "BedrockModel.stream": (streaming(bedrock), args.requests),
        "aiohttp loop, Gemini body (baseline)": (
            aiohttp_call(session, gemini_url, gemini_body, gemini_headers),
            args.requests,
        ),
        "GeminiModel.complete": (completing(gemini), args.requests),
        "GeminiModel.stream": (streaming(gemini), args.requests),
    }
    if args.with_plain_httpx:
        clients["plain httpx.AsyncClient (default pool)"] = (
            httpx_call(plain_httpx, base + "/v1/chat/completions", openai_body, json_headers),
            max(args.inflight * 2, args.requests // 5),
        )
    for call, _ in clients.values():  # warm up connections and caches
        await drive(call, args.inflight, args.inflight)
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in clients}
    for _ in range(args.rounds):
        for name, (call, total) in clients.items():
            results[name].append(await drive(call, total, args.inflight))
    await session.close()
    await plain_httpx.aclose()
    report(args, results)


def _wire(name: str) -> str:
    return next((w for w in ("Anthropic", "Responses", "Gemini", "Bedrock") if w in name), "OpenAI")


def report(args: argparse.Namespace, results: dict[str, list[tuple[float, float]]]) -> None:
    median = {n: statistics.median(r[0] for r in rs) for n, rs in results.items()}
    cpu = {n: statistics.median(r[1] for r in rs) for n, rs in results.items()}
    ideal = args.inflight * 1000 / args.latency_ms
    print(
        f"\n{args.inflight} in flight, {args.latency_ms} ms latency, {args.requests} requests"
        f" a round, median of {args.rounds} interleaved rounds (ideal {ideal:.0f} req/s)\n"
    )
    print(f"{'client':44} {'req/s':>8} {'vs loop':>8} {'CPU ms/req':>11} {'CPU vs loop':>12}")
    for name in results:
        base_name = next(b for b in results if "baseline" in b and _wire(b) == _wire(name))
        ratio = median[name] / median[base_name]
        over = cpu[name] / cpu[base_name]
        print(f"{name:44} {median[name]:8.0f} {ratio:8.2f} {cpu[name]:11.2f} {over:11.2f}x")
    for name in results:
        if "baseline" in name or "plain httpx" in name:
            continue
        base_name = next(b for b in results if "baseline" in b and _wire(b) == _wire(name))
        ratio = median[name] / median[base_name]
        verdict = "ok" if ratio >= TARGET else "BELOW TARGET"
        print(f"ratio {name} / aiohttp loop: {ratio:.2f} (target >= {TARGET}: {verdict})")
    print("\nreproduce: python benchmarks/bench_adapter_throughput.py " + " ".join(sys.argv[1:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1280)
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--latency-ms", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--with-plain-httpx", action="store_true", help="also time httpx's own pool (slow)"
    )
    args = parser.parse_args()
    with sim_process("--latency-ms", str(args.latency_ms)) as base:
        asyncio.run(run(args, base))


if __name__ == "__main__":
    main()

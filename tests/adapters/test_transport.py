"""Both ways a request leaves, alike: straight to the shared aiohttp session (no
`http_client=`), or through an injected `httpx.AsyncClient`. Each keeps every behaviour:
replies whole and streamed, the model's timeouts, typed connection errors, a body over
1 MiB sent in chunks and received whole, an abort closing the connection."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from adapter_support import make_model
from aiohttp import web

from raygent import AbortController, OpenAIModel, UserMessage
from raygent.errors import (
    AbortedError,
    ProviderConnectionError,
    ProviderTimeoutError,
)
from raygent.models import Done, TextDelta
from raygent.sim import Latency, Reply, Rule, serve

HELLO = [UserMessage(content="hello")]


@pytest.fixture(params=["shared", "injected"])
def way(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@asynccontextmanager
async def sent(way: str) -> AsyncIterator[tuple[dict[str, Any], list[httpx.Request]]]:
    """The settings that send the given way, and the requests an injected client sent."""
    if way == "shared":
        yield {}, []
        return
    requests: list[httpx.Request] = []

    async def record(request: httpx.Request) -> None:
        requests.append(request)

    async with httpx.AsyncClient(event_hooks={"request": [record]}) as client:
        yield {"http_client": client}, requests


class _Urls:
    def __init__(self, url: str) -> None:
        self.openai_base_url = url + "/v1"
        self.anthropic_base_url = url
        self.url = url  # Bedrock's endpoint
        self.gemini_base_url = url


async def test_replies_whole_and_streamed(provider: str, way: str) -> None:
    async with serve([Rule(reply=Reply(text="one two three"))]) as sim, sent(way) as (kw, requests):
        model = make_model(provider, sim, **kw)
        whole = await model.complete(HELLO)
        chunks = [c async for c in model.stream(HELLO)]
    done = chunks[-1]
    assert isinstance(done, Done)
    assert (
        whole.text
        == done.response.text
        == "".join(c.text for c in chunks if isinstance(c, TextDelta))
    )
    assert len(requests) == (2 if way == "injected" else 0)
    assert sim.stats().requests == 2


Recorded = list[tuple[int, dict[str, str]]]


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[Recorded, str, list[str]]]:
    """A server that records each request's body length, headers and raw path, and
    answers 500."""
    got: Recorded = []
    paths: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        got.append((len(body), {k.lower(): v for k, v in request.headers.items()}))
        paths.append(request.raw_path)
        return web.json_response({"error": {"message": "recorded"}}, status=500)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield got, f"http://127.0.0.1:{port}", paths
    await runner.cleanup()


async def test_a_body_over_a_mebibyte_goes_in_chunks_and_arrives_whole(
    provider: str, way: str, recorder: Any
) -> None:
    got, url, _ = recorder
    big = [UserMessage(content="x" * 3_000_000)]
    async with sent(way) as (settings, _):
        model = make_model(provider, _Urls(url), **settings)
        with pytest.raises(Exception, match="recorded"):
            await model.complete(big)
    [(length, headers)] = got
    assert length > 3_000_000
    assert headers["content-length"] == str(length)  # said up front, not chunked encoding
    assert "transfer-encoding" not in headers


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_a_refused_connection_is_a_connection_error(
    provider: str, way: str, streamed: bool
) -> None:
    port = _closed_port()
    async with sent(way) as (settings, _):
        model = make_model(provider, _Urls(f"http://127.0.0.1:{port}"), **settings)
        with pytest.raises(ProviderConnectionError) as info:
            if streamed:
                async for _ in model.stream(HELLO):
                    pass
            else:
                await model.complete(HELLO)
    assert f"127.0.0.1:{port}" in str(info.value)


@pytest.fixture
async def silent_server() -> AsyncIterator[str]:
    """Accepts connections and reads, never answers."""
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read(65536)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    for writer in held:
        writer.close()
    server.close()


async def test_the_models_timeout_holds_either_way(
    provider: str, way: str, silent_server: str
) -> None:
    async with sent(way) as (settings, _):
        model = make_model(provider, _Urls(silent_server), timeout=0.3, **settings)
        with pytest.raises(ProviderTimeoutError):
            await model.complete(HELLO)


async def test_an_abort_mid_stream_closes_the_connection(provider: str, way: str) -> None:
    async with serve(
        [Rule(reply=Reply(text="tick " * 400))], latency=Latency(per_token_ms=5)
    ) as sim:
        async with sent(way) as (settings, _):
            controller = AbortController()
            seen = 0
            with pytest.raises(AbortedError):
                model = make_model(provider, sim, **settings)
                async for chunk in model.stream(HELLO, signal=controller.signal):
                    if isinstance(chunk, TextDelta):
                        seen += 1
                        if seen == 3:
                            controller.abort("enough")
            await sim.wait_until(lambda s: s.disconnects == 1)
        assert sim.stats().in_flight == 0


async def test_an_injected_client_on_httpx_aiohttp_names_a_refused_host(provider: str) -> None:
    """httpx-aiohttp maps a refused connection to `ConnectTimeout`: it is said as what
    it is, a connection error, not a timeout."""
    from httpx_aiohttp import AiohttpTransport

    port = _closed_port()
    async with httpx.AsyncClient(transport=AiohttpTransport()) as client:
        model = make_model(provider, _Urls(f"http://127.0.0.1:{port}"), http_client=client)
        with pytest.raises(ProviderConnectionError):
            await model.complete(HELLO)


class _Escaped(OpenAIModel):
    """A wire whose path carries escapes a signature covers (a Bedrock model ARN)."""

    def request_path(self, *, stream: bool) -> str:
        return "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Aprofile%2Fus.m/converse?x=a%2Fb"


async def test_a_path_goes_out_as_the_wire_escaped_it(way: str, recorder: Any) -> None:
    _, url, paths = recorder
    async with sent(way) as (settings, _):
        model = _Escaped("m", base_url=url, api_key="sk-test-key-000000", **settings)
        with pytest.raises(Exception, match="recorded"):
            await model.complete(HELLO)
    assert paths == ["/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Aprofile%2Fus.m/converse?x=a%2Fb"]

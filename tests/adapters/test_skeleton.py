"""The skeleton every wire stands on: a wire states hooks, `HTTPModel` does the rest.

A toy wire written here, as the next wires (Gemini, Bedrock) will be, with none of the
OpenAI or Anthropic shapes: its stream posts to another URL than its reply, every
request is signed over its body's bytes, its stream is framed in binary (length-prefixed
frames, not SSE), its errors are Google-shaped with a retry delay in the body, it sends
no rate headers. A real aiohttp server answers it and checks each signature. What the
skeleton adds is checked on it: pricing (online, batch, by tier), typed errors from
replies and from events inside a stream, the whole reply assembled from a stream.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from raygent import (
    AnthropicModel,
    ModelOptions,
    OpenAIModel,
    OpenAIResponsesModel,
    Pricing,
    UserMessage,
)
from raygent.errors import (
    AuthenticationError,
    InvalidRequestError,
    ProviderResponseError,
    RateLimitError,
    ServerError,
)
from raygent.messages import Message, TextPart
from raygent.models import Done, StreamChunk, TextDelta, UsageChunk
from raygent.models._errors import ErrorSaid
from raygent.models._http import HTTPModel
from raygent.models._transport import Outgoing
from raygent.models._wire import ErrorEvent, Reply, json_object, text_field
from raygent.usage import Usage

SECRET = b"toy-signing-secret-000"
HELLO = [UserMessage(content="hello")]
PRICING = Pricing(input_per_mtok=1_000_000.0, output_per_mtok=2_000_000.0)


# -- the toy wire: what an adapter states -----------------------------------------------


@dataclass(frozen=True, slots=True)
class Frame:
    event: str | None
    data: str


class FrameDecoder:
    """Length-prefixed frames: 4 bytes big-endian, then a JSON {"event", "data"}."""

    def __init__(self) -> None:
        self.buffer = b""

    def feed(self, chunk: bytes) -> list[Frame]:
        self.buffer += chunk
        frames = []
        while len(self.buffer) >= 4:
            (size,) = struct.unpack(">I", self.buffer[:4])
            if len(self.buffer) < 4 + size:
                break
            payload = json.loads(self.buffer[4 : 4 + size])
            self.buffer = self.buffer[4 + size :]
            frames.append(Frame(payload["event"], json.dumps(payload["data"])))
        return frames


@dataclass
class ToyStream:
    text: list[str] = field(default_factory=list)
    usage: Usage | None = None
    finish: str | None = None
    service_tier: str | None = None
    ended: bool = False

    def feed(self, frame: Frame) -> list[StreamChunk]:
        data = json_object(frame.data)
        if frame.event == "exception":
            raise ErrorEvent(data, status=int(data["error"]["code"]))
        if frame.event == "delta":
            piece = text_field(data["text"])
            self.text.append(piece)
            return [TextDelta(piece)]
        if frame.event == "stop":
            self.finish, self.ended = text_field(data["finish"]), True
            self.service_tier = data.get("tier")
            self.usage = _usage(data["usage"])
            return [UsageChunk(self.usage)]
        return []

    def reply(self) -> Reply | None:
        if not self.ended or self.usage is None:
            return None
        content = [TextPart(text="".join(self.text))]
        return Reply(content, [], "stop", self.usage, service_tier=self.service_tier)


def _usage(raw: dict[str, Any]) -> Usage:
    return Usage(requests=1, input_tokens=int(raw["in"]), output_tokens=int(raw["out"]))


class ToyModel(HTTPModel):
    provider = "toy"
    env_key = "TOY_API_KEY"
    default_base_url = "https://toy.invalid/v1"

    def request_path(self, *, stream: bool) -> str:
        return f"/models/{self.name}:" + ("stream?alt=frames" if stream else "generate")

    def build_body(
        self, messages: Sequence[Message], options: ModelOptions, *, stream: bool
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"turns": [m.text for m in messages]}
        if options.service_tier is not None:
            body["tier"] = options.service_tier
        return body

    def parse_reply(self, data: dict[str, Any]) -> Reply:
        if "error" in data:
            raise ErrorEvent(data)  # an error inside a 200 reply
        content = [TextPart(text=text_field(data["text"]))]
        return Reply(content, [], "stop", _usage(data["usage"]), data.get("id"))

    def stream_feeder(self) -> ToyStream:
        return ToyStream()

    def stream_decoder(self) -> FrameDecoder:
        return FrameDecoder()

    async def sign(self, request: Outgoing) -> None:
        digest = hmac.new(SECRET, request.content or b"", hashlib.sha256).hexdigest()
        request.headers["x-toy-signature"] = digest

    def error_said(self, body: Any, headers: Any) -> ErrorSaid:
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict):
            return ErrorSaid(None, str(body), raw=True)
        delay = next((d["retryDelay"] for d in error.get("details", ()) if "retryDelay" in d), None)
        retry = float(delay.removesuffix("s")) if delay else None
        return ErrorSaid(error.get("status"), error.get("message"), retry_after=retry)


# -- a server that speaks it ------------------------------------------------------------


@dataclass
class ToyServer:
    url: str = ""
    seen: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    fail: tuple[int, dict[str, Any]] | None = None  # answer every request so
    frames: list[dict[str, Any]] | None = None  # the stream's frames, if not the usual

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        expected = hmac.new(SECRET, raw, hashlib.sha256).hexdigest()
        if request.headers.get("x-toy-signature") != expected:
            return web.json_response(
                {"error": {"code": 403, "status": "BAD_SIGNATURE"}}, status=403
            )
        body = json.loads(raw)
        self.seen.append((request.path_qs, body))
        if self.fail is not None:
            return web.json_response(self.fail[1], status=self.fail[0])
        text = "echo: " + " ".join(body["turns"])
        usage = {"in": 3, "out": 2}
        if request.path.endswith(":generate"):
            return web.json_response({"id": "toy-1", "text": text, "usage": usage})
        response = web.StreamResponse(headers={"content-type": "application/x-toy-frames"})
        await response.prepare(request)
        frames = self.frames or [
            *({"event": "delta", "data": {"text": w}} for w in (text[:4], text[4:])),
            {"event": "stop", "data": {"finish": "stop", "usage": usage, "tier": body.get("tier")}},
        ]
        for frame in frames:
            payload = json.dumps(frame).encode()
            await response.write(struct.pack(">I", len(payload)) + payload)
        await response.write_eof()
        return response


@pytest.fixture
async def toy() -> AsyncIterator[ToyServer]:
    server = ToyServer()
    app = web.Application()
    app.router.add_post("/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    server.url = f"http://127.0.0.1:{port}/v1"
    yield server
    await runner.cleanup()


def toy_model(server: ToyServer, **settings: Any) -> ToyModel:
    return ToyModel("toy-1", base_url=server.url, api_key=None, pricing=PRICING, **settings)


async def streamed(model: HTTPModel, options: ModelOptions | None = None) -> list[StreamChunk]:
    return [chunk async for chunk in model.stream(HELLO, options)]


# -- the tests --------------------------------------------------------------------------


async def test_a_wire_of_hooks_only_answers_whole_and_priced(toy: ToyServer) -> None:
    reply = await toy_model(toy).complete(HELLO)
    assert toy.seen == [("/v1/models/toy-1:generate", {"turns": ["hello"]})]
    assert reply.text == "echo: hello" and reply.provider == "toy"
    assert reply.response_id == "toy-1" and reply.finish_reason == "stop"
    assert reply.usage.input_tokens == 3 and reply.usage.cost is not None
    assert reply.usage.cost.total == pytest.approx(3 + 4)  # 3 M/Mtok in, 2 x 2 M/Mtok out
    assert reply.rate is None  # the wire sends no rate headers


async def test_its_stream_goes_to_its_own_url_in_its_own_framing(toy: ToyServer) -> None:
    model = toy_model(toy)
    chunks = await streamed(model)
    assert toy.seen[0][0] == "/v1/models/toy-1:stream?alt=frames"
    assert [c.text for c in chunks if isinstance(c, TextDelta)] == ["echo", ": hello"]
    [usage] = [c for c in chunks if isinstance(c, UsageChunk)]
    assert usage.usage.cost is not None and usage.usage.cost.total == pytest.approx(7)
    done = chunks[-1]
    assert isinstance(done, Done)
    whole = await model.complete(HELLO)
    assert done.response.text == whole.text and done.response.usage == whole.usage


async def test_the_reply_is_priced_at_the_tier_that_served_it(toy: ToyServer) -> None:
    pricing = PRICING.model_copy(update={"flex_multiplier": 0.5})
    model = ToyModel("toy-1", base_url=toy.url, api_key=None, pricing=pricing)
    chunks = await streamed(model, ModelOptions(service_tier="flex"))
    done = chunks[-1]
    assert isinstance(done, Done) and done.response.service_tier == "flex"
    assert done.response.usage.cost is not None
    assert done.response.usage.cost.total == pytest.approx(3.5)


async def test_a_batch_lines_reply_is_read_as_online_at_batch_rates(toy: ToyServer) -> None:
    model = toy_model(toy)
    online = await model.complete(HELLO)
    line = model.batch_reply({"id": "toy-1", "text": "echo: hello", "usage": {"in": 3, "out": 2}})
    assert line.text == online.text
    assert online.usage.cost is not None and line.usage.cost is not None
    assert line.usage.cost.total == pytest.approx(online.usage.cost.total / 2)


@pytest.mark.parametrize("cls", [OpenAIModel, OpenAIResponsesModel, AnthropicModel])
def test_a_batch_lines_body_is_the_online_one_with_no_stream_and_no_tier(cls: Any) -> None:
    model = cls("m", api_key="sk-test-key-000000", service_tier="auto")
    online = model.request_body(HELLO, None, stream=True)
    assert online["service_tier"] == "auto" and online["stream"] is True
    line = model.batch_body(HELLO, None)
    assert line == {
        k: v for k, v in online.items() if k not in ("stream", "service_tier", "stream_options")
    }


async def test_an_error_body_the_wire_reads_maps_to_a_typed_error(toy: ToyServer) -> None:
    toy.fail = (
        429,
        {
            "error": {
                "code": 429,
                "status": "RESOURCE_EXHAUSTED",
                "message": "quota",
                "details": [{"@type": "RetryInfo", "retryDelay": "37s"}],
            }
        },
    )
    model = toy_model(toy)
    for call in (model.complete(HELLO), streamed(model)):
        with pytest.raises(RateLimitError) as info:
            await call
        assert info.value.retry_after == 37.0
        assert info.value.provider_code == "RESOURCE_EXHAUSTED" and info.value.provider == "toy"


async def test_an_error_inside_a_reply_or_a_stream_is_typed(toy: ToyServer) -> None:
    model = toy_model(toy)
    toy.frames = [
        {"event": "delta", "data": {"text": "par"}},
        {"event": "exception", "data": {"error": {"code": 400, "status": "BAD", "message": "no"}}},
    ]
    seen: list[StreamChunk] = []
    with pytest.raises(InvalidRequestError) as info:
        async for chunk in model.stream(HELLO):
            seen.append(chunk)
    assert info.value.provider_code == "BAD" and not any(isinstance(c, Done) for c in seen)
    toy.frames, toy.fail = None, (200, {"error": {"status": "INTERNAL", "message": "oops"}})
    with pytest.raises(ServerError) as failed:  # an error in a 200 reply
        await model.complete(HELLO)
    assert failed.value.provider_code == "INTERNAL"


class ForgedModel(ToyModel):
    async def sign(self, request: Outgoing) -> None:
        request.headers["x-toy-signature"] = "forged"


async def test_every_request_is_signed_over_its_final_bytes(toy: ToyServer) -> None:
    # The server checks each signature over the bytes it got: a forged one is refused.
    await toy_model(toy).complete(HELLO)
    await streamed(toy_model(toy))
    assert len(toy.seen) == 2
    with pytest.raises(AuthenticationError):
        await ForgedModel("toy-1", base_url=toy.url, api_key=None).complete(HELLO)
    assert len(toy.seen) == 2


async def test_a_stream_that_stops_short_or_a_malformed_reply_is_typed(toy: ToyServer) -> None:
    model = toy_model(toy)
    toy.frames = [{"event": "delta", "data": {"text": "par"}}]
    with pytest.raises(ProviderResponseError, match="before the reply was complete"):
        await streamed(model)
    toy.frames = [{"event": "delta", "data": {"text": 7}}]
    with pytest.raises(ProviderResponseError, match="malformed stream event"):
        await streamed(model)
    reply = model.batch_reply  # a whole reply of the wrong shape
    with pytest.raises(ProviderResponseError, match="malformed reply"):
        reply({"text": ["not", "text"], "usage": {"in": 1, "out": 1}})


async def test_a_wire_that_signs_asks_for_no_key(toy: ToyServer) -> None:
    # On its own default URL with no `api_key=`: a wire with a key would refuse it.
    keyed = type("Keyed", (ToyModel,), {"default_base_url": toy.url})
    keyless = type("Keyless", (keyed,), {"env_key": ""})  # its requests are signed
    reply = await keyless("toy-1").complete(HELLO)
    assert reply.text == "echo: hello"
    with pytest.raises(AuthenticationError, match="TOY_API_KEY"):
        await keyed("toy-1").complete(HELLO)

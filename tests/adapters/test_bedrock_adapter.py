"""`raygent.BedrockModel` against the simulator over real HTTP, every request signed
and its signature verified; boto3's own `bedrock-runtime` client is the authority on
the wire: it sends the bodies raygent builds (validated against its service model) and
reads the same replies."""

from __future__ import annotations

import asyncio
import base64
import copy
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from aiohttp import web
from botocore.config import Config

import raygent
from raygent import AbortController, AttachmentPolicy, BedrockModel, OutboundPolicy
from raygent.errors import (
    AbortedError,
    AuthenticationError,
    ContextLengthExceededError,
    GuardrailInterventionError,
    InvalidOptionsError,
    InvalidRequestError,
    OutboundPolicyError,
    RateLimitError,
    RefusalError,
    ServerError,
    UnknownOptionError,
)
from raygent.messages import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from raygent.models import CacheControl, ModelOptions, ReasoningOptions, ResponseSchema, ToolSpec
from raygent.models.contract import Done, ReasoningDelta, TextDelta, ToolCallDelta
from raygent.sim import Fault, Match, Reply, Rule, ServiceTiers, Simulator, ToolCallReply, serve
from raygent.sim._bedrock_auth import TEST_CREDENTIALS, TEST_SESSION_CREDENTIALS

CLAUDE = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
REGION = "us-east-1"
WEATHER = ToolSpec(
    name="get_weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
SCRIPT = [
    Rule(
        match=Match(last_user="weather", after_tool_result=False),
        reply=Reply(text="Checking.", tool_calls=[ToolCallReply("get_weather", {"city": "Oslo"})]),
    ),
    Rule(match=Match(after_tool_result=True), reply=Reply(text="3 C in Oslo.")),
    Rule(match=Match(last_user="think"), reply=Reply(thinking="Step by step.", text="42")),
    Rule(match=Match(last_user="forbidden"), reply=Reply(refusal="Sorry, I cannot help.")),
]
# A 1x1 PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6300010000050001a5f645400000000049454e44ae426082"
)


def ask(text: str) -> list[UserMessage]:
    return [UserMessage(content=text)]


def bedrock(sim: Simulator, model_id: str = CLAUDE, **kwargs: Any) -> BedrockModel:
    kwargs.setdefault("access_key", TEST_CREDENTIALS.access_key)
    kwargs.setdefault("secret_key", TEST_CREDENTIALS.secret_key)
    return BedrockModel(model_id, base_url=sim.url, region=REGION, **kwargs)


@pytest.fixture
def boto_runtime() -> Iterator[Any]:
    """A factory of boto3 bedrock-runtime clients for a simulator, closed at teardown."""
    made: list[Any] = []

    def client(sim: Simulator) -> Any:
        runtime = boto3.client(
            "bedrock-runtime",
            region_name=REGION,
            endpoint_url=sim.url,
            aws_access_key_id=TEST_CREDENTIALS.access_key,
            aws_secret_access_key=TEST_CREDENTIALS.secret_key,
            config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),
        )
        made.append(runtime)
        return runtime

    yield client
    for runtime in made:
        runtime.close()


async def _stream(model: BedrockModel, messages: list[Any], options: Any = None) -> list[Any]:
    return [chunk async for chunk in model.stream(messages, options)]


async def test_complete_and_stream_signed_verified_and_priced() -> None:
    arn = f"arn:aws:bedrock:{REGION}:123456789012:inference-profile/{CLAUDE}"
    async with serve(SCRIPT, api_key=TEST_CREDENTIALS.access_key) as sim:
        model = bedrock(sim)
        whole = await model.complete(ask("Hello"))
        chunks = await _stream(model, [UserMessage(content="Hello")])
        by_arn = await bedrock(sim, arn).complete(ask("Hello"))
        by_id = await bedrock(sim, "anthropic.claude-3-haiku-20240307-v1:0").complete(ask("Hi"))
        paths = [r.path for r in sim.requests]
        signed = [r.headers["authorization"] for r in sim.requests]
    assert whole.text == "Simulated reply to: Hello" and whole.provider == "bedrock"
    assert whole.usage.cost is not None and whole.usage.cost.total > 0  # genai-prices, aws
    assert not whole.usage.input_includes_cache
    done = chunks[-1]
    assert isinstance(done, Done) and done.response.text == whole.text
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == whole.text
    assert done.response.usage == whole.usage
    assert by_arn.text and by_id.usage.cost is not None
    assert paths == [
        f"/model/{CLAUDE}/converse",
        f"/model/{CLAUDE}/converse-stream",
        f"/model/{arn}/converse",
        "/model/anthropic.claude-3-haiku-20240307-v1:0/converse",
    ]
    assert signed == ["[redacted]"] * 4  # the simulator recomputed every signature


def _conversations(first: Any) -> list[tuple[list[Any], ModelOptions]]:
    """Requests of every kind a run sends: tools and results by id, structured output,
    cache points, reasoning and the reasoning sent back, a tier."""
    call = first.tool_calls[0]
    history = [
        UserMessage(content="weather in Oslo?"),
        first.message,
        ToolMessage(call_id=call.call_id, content="3 C"),
    ]
    schema = ResponseSchema(
        name="city",
        json_schema={"type": "object", "properties": {"name": {"type": "string"}}},
    )
    return [
        ([UserMessage(content="weather in Oslo?")], ModelOptions(tools=(WEATHER,))),
        (history, ModelOptions(tools=(WEATHER,), tool_choice="auto")),
        ([UserMessage(content="a city")], ModelOptions(response_schema=schema, max_tokens=64)),
        (
            [SystemMessage(content="You are terse. " * 50), UserMessage(content="hi")],
            ModelOptions(cache_control=CacheControl(breakpoints=2)),
        ),
        ([UserMessage(content="think")], ModelOptions(reasoning=ReasoningOptions(effort="low"))),
        ([UserMessage(content="hi")], ModelOptions(service_tier="priority", temperature=0.2)),
    ]


async def test_bodies_are_what_boto3_sends_and_replies_what_it_reads(boto_runtime: Any) -> None:
    async with serve(SCRIPT) as sim:
        model = bedrock(sim)
        first = await model.complete(ask("weather in Oslo?"), ModelOptions(tools=(WEATHER,)))
        client = boto_runtime(sim)
        ours, theirs = [], []
        for messages, options in _conversations(first):
            body = model.request_body(messages, options, stream=False)
            start = len(sim.requests)
            ours.append(await model.complete(messages, options))
            # boto3 validates the body against its service model, then sends it.
            theirs.append(await asyncio.to_thread(client.converse, modelId=CLAUDE, **body))
            sent_ours, sent_boto = (r.body for r in sim.requests[start:])
            assert sent_ours == sent_boto
    for reply, read in zip(ours, theirs, strict=True):
        content = read["output"]["message"]["content"]
        assert reply.text == "".join(b.get("text", "") for b in content)
        uses = [b["toolUse"] for b in content if "toolUse" in b]
        assert [(c.call_id, c.arguments) for c in reply.tool_calls] == [
            (u["toolUseId"], u["input"]) for u in uses
        ]
        assert reply.usage.input_tokens == read["usage"]["inputTokens"]
        assert reply.usage.output_tokens == read["usage"]["outputTokens"]
    assert ours[1].text == "3 C in Oslo."  # the result went back by the call's id
    assert ours[4].blocks[0].kind == "reasoningContent"
    assert ours[5].service_tier == "priority" == theirs[5]["serviceTier"]["type"]


async def test_reasoning_goes_back_with_its_signature_streamed_or_not() -> None:
    think = ModelOptions(reasoning=ReasoningOptions(effort="low"))
    async with serve(SCRIPT) as sim:
        model = bedrock(sim)
        first = await model.complete(ask("think"), think)
        chunks = await _stream(model, [UserMessage(content="think")], think)
        streamed = chunks[-1].response
        again = [UserMessage(content="think"), streamed.message, UserMessage(content="more")]
        second = await model.complete(again, think)
        tampered = copy.deepcopy(first.message)
        tampered.content[0].data["reasoningContent"]["reasoningText"]["text"] = "edited"
        with pytest.raises(InvalidRequestError, match="signature"):
            await model.complete([*ask("think"), tampered, *ask("more")], think)
    reasoning = first.blocks[0].data["reasoningContent"]["reasoningText"]
    assert reasoning["text"] == "Step by step." and reasoning["signature"]
    assert streamed.blocks[0].data == first.blocks[0].data
    assert "".join(c.text for c in chunks if isinstance(c, ReasoningDelta)) == "Step by step."
    assert second.finish_reason == "stop"


async def test_cache_points_written_read_and_priced() -> None:
    system = "You are terse and exact. " * 120
    cache = ModelOptions(cache_control=CacheControl(breakpoints=["system"]))
    async with serve() as sim:
        model = bedrock(sim)
        wrote = await model.complete([SystemMessage(content=system), *ask("a")], cache)
        read = await model.complete([SystemMessage(content=system), *ask("b")], cache)
        plain = await model.complete([SystemMessage(content=system), *ask("b")])
    assert wrote.usage.cache_write_tokens > 0 and wrote.usage.cached_tokens == 0
    assert read.usage.cached_tokens == wrote.usage.cache_write_tokens
    assert wrote.usage.cost is not None and wrote.usage.cost.cache_write > 0
    assert read.usage.cost is not None and plain.usage.cost is not None
    assert 0 < read.usage.cost.cached_input < plain.usage.cost.input  # reads cost less


async def test_a_guardrails_intervention_is_typed_streamed_or_not() -> None:
    guardrail = {"guardrailIdentifier": "gr-1", "guardrailVersion": "1", "trace": "enabled"}
    async with serve(SCRIPT) as sim:
        model = bedrock(sim, guardrail=guardrail)
        with pytest.raises(GuardrailInterventionError) as whole:
            await model.complete(ask("forbidden"))
        with pytest.raises(GuardrailInterventionError) as streamed:
            await _stream(model, [UserMessage(content="forbidden")])
        refused = await raygent.agent(model=bedrock(sim)).execute("forbidden")
        body = sim.requests[0].body
    assert body["guardrailConfig"] == guardrail
    for caught in (whole.value, streamed.value):
        assert caught.details["output"] == "Sorry, I cannot help."
        assert caught.details["provider"] == "bedrock"
    # Content filtered with no guardrail is a refusal, as other wires' are.
    assert isinstance(refused.error, RefusalError)


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize(
    ("fault", "typed", "code"),
    [
        (Fault(kind="status", status=429), RateLimitError, "ThrottlingException"),
        (Fault(kind="status", status=503), ServerError, "ServiceUnavailableException"),
        (
            Fault(
                kind="status", status=429, headers={"x-amzn-ErrorType": "ModelNotReadyException"}
            ),
            ServerError,
            "ModelNotReadyException",
        ),
        (
            Fault(kind="status", status=400, message="Malformed input request"),
            InvalidRequestError,
            "ValidationException",
        ),
        (Fault(kind="context_exceeded"), ContextLengthExceededError, "ValidationException"),
        (Fault(kind="status", status=403), AuthenticationError, "AccessDeniedException"),
    ],
)
async def test_bedrock_errors_are_typed(
    fault: Fault, typed: type[Exception], code: str, stream: bool
) -> None:
    async with serve([Rule(reply=Reply(fault=fault))]) as sim:
        model = bedrock(sim)
        with pytest.raises(typed) as caught:
            if stream:
                await _stream(model, [UserMessage(content="x")])
            else:
                await model.complete(ask("x"))
    assert type(caught.value) is typed
    assert caught.value.details["provider_code"] == code
    assert caught.value.details["request_id"]


async def test_an_exception_inside_the_stream_is_typed() -> None:
    fault = Fault(kind="stream_error", after_chunks=2)
    async with serve([Rule(reply=Reply(text="x" * 80, fault=fault))]) as sim:
        with pytest.raises(ServerError) as caught:
            await _stream(bedrock(sim), [UserMessage(content="x")])
    assert caught.value.details["provider_code"] == "ModelStreamErrorException"


async def test_throttling_goes_to_the_rate_limiter_and_the_run_goes_on() -> None:
    script = [
        Rule(reply=Reply(fault=Fault(kind="status", status=429)), times=1),
        Rule(reply=Reply(text="after the throttle")),
    ]
    async with serve(script) as sim:
        result = await raygent.agent(model=bedrock(sim)).execute("hi")
        stats = sim.stats()
    assert result.ok, result.error
    assert result.text == "after the throttle"
    assert stats.by_status == {429: 1, 200: 1}
    [trip] = result.report.trips
    assert trip.usage.requests == 2  # the throttled send is counted, billed nothing


async def test_attachments_as_bytes_image_urls_downloaded_under_the_policy(
    tmp_path: Path,
) -> None:
    """Bedrock fetches no image URL: raygent downloads it under the outbound policy (a
    refusal typed before any request when the policy does not allow it)."""
    (tmp_path / "cat.png").write_bytes(PNG)

    async def dog(_: web.Request) -> web.Response:
        return web.Response(body=PNG, content_type="image/png")

    app = web.Application()
    app.router.add_get("/dog.png", dog)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    local_fetch = AttachmentPolicy(
        allowed_roots=[tmp_path],
        allow_remote_fetch=True,
        outbound=OutboundPolicy(schemes=("http",), trusted_networks=("127.0.0.1/32",)),
    )
    url = f"http://127.0.0.1:{port}/dog.png"
    try:
        async with serve() as sim:
            strict = raygent.agent(
                model=bedrock(sim), attachment_policy=AttachmentPolicy(allowed_roots=[tmp_path])
            )
            seen = await strict.execute("What is it?", attachments=[str(tmp_path / "cat.png")])
            sent = sim.requests[-1].body["messages"][0]["content"][0]
            refused = await strict.execute("And this?", attachments=[url])
            requests = len(sim.requests)
            fetching = raygent.agent(model=bedrock(sim), attachment_policy=local_fetch)
            fetched = await fetching.execute("And now?", attachments=[url])
            downloaded = sim.requests[-1].body["messages"][0]["content"][0]
    finally:
        await runner.cleanup()
    image = {"image": {"format": "png", "source": {"bytes": base64.b64encode(PNG).decode()}}}
    assert seen.ok, seen.error
    assert sent == image
    assert isinstance(refused.error, OutboundPolicyError)
    assert requests == 1  # refused before any request
    assert fetched.ok, fetched.error
    assert downloaded == image


async def test_cancellation_closes_the_request() -> None:
    hang = Fault(kind="hang", after_chunks=3)
    async with serve([Rule(reply=Reply(text="a long reply " * 20, fault=hang))]) as sim:
        controller = AbortController()
        model = bedrock(sim)

        async def read() -> None:
            async for chunk in model.stream([UserMessage(content="hi")], signal=controller.signal):
                if isinstance(chunk, TextDelta):
                    controller.abort("enough")

        with pytest.raises(AbortedError) as caught:
            await read()
        stats = await sim.wait_until(lambda s: s.disconnects == 1 and s.in_flight == 0, 10.0)
    assert stats.requests == 1
    assert caught.value.usage is not None and caught.value.usage.requests == 1


def test_a_misspelt_setting_is_refused_before_any_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(UnknownOptionError, match="did you mean 'region'"):
        BedrockModel(CLAUDE, regoin="us-east-1")  # type: ignore[call-arg]
    with pytest.raises(UnknownOptionError, match="max_tokens"):
        BedrockModel(CLAUDE, region=REGION, max_tokens=5)  # type: ignore[call-arg]
    with pytest.raises(InvalidOptionsError, match="no AWS region"):
        BedrockModel(CLAUDE)


async def test_credentials_from_the_chain_profiles_and_api_keys(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    session = TEST_SESSION_CREDENTIALS
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_BEARER_TOKEN_BEDROCK", raising=False)
    shared = tmp_path / "credentials"
    shared.write_text(
        f"[team]\naws_access_key_id = {session.access_key}\n"
        f"aws_secret_access_key = {session.secret_key}\n"
        f"aws_session_token = {session.session_token}\n"
    )
    config = tmp_path / "config"
    config.write_text("[profile team]\nregion = eu-west-3\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(shared))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    async with serve(api_key=session.access_key) as sim:
        by_profile = BedrockModel(CLAUDE, profile="team", base_url=sim.url)
        shipped = pickle.loads(pickle.dumps(by_profile))  # as Ray ships it: resolved there
        answered = await shipped.complete(ask("hi"))
        token = sim.requests[0].headers["x-amz-security-token"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", TEST_CREDENTIALS.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", TEST_CREDENTIALS.secret_key)
    async with serve(api_key=TEST_CREDENTIALS.access_key) as sim:
        by_env = await BedrockModel(CLAUDE, region=REGION, base_url=sim.url).complete(ask("hi"))
    async with serve(api_key="bedrock-api-key-1") as sim:
        by_key = BedrockModel(CLAUDE, region=REGION, base_url=sim.url, api_key="bedrock-api-key-1")
        keyed = await by_key.complete(ask("hi"))
    assert by_profile.region == "eu-west-3"
    assert answered.text and by_env.text and keyed.text
    assert token == session.session_token
    wrong = BedrockModel(CLAUDE, region=REGION, access_key="AKIASIMULATOR0000001", secret_key="no")
    assert wrong.key_fingerprint == bedrock_fingerprint(TEST_CREDENTIALS.access_key)
    assert "no" not in repr(wrong)


def bedrock_fingerprint(access_key: str) -> str:
    model = BedrockModel(CLAUDE, region=REGION, access_key=access_key, secret_key="x")
    return model.key_fingerprint


async def test_a_wrong_secret_is_an_authentication_error_redacted() -> None:
    secret = "wrong/secret/that/must/not/leak/0000000"
    async with serve() as sim:
        with pytest.raises(AuthenticationError) as caught:
            await bedrock(sim, secret_key=secret).complete(ask("hi"))
    assert caught.value.details["provider_code"] == "InvalidSignatureException"
    assert secret not in str(caught.value.to_dict())


async def test_tools_by_id_streamed_as_completed() -> None:
    async with serve(SCRIPT) as sim:
        model = bedrock(sim)
        options = ModelOptions(tools=(WEATHER,))
        chunks = await _stream(model, [UserMessage(content="weather?")], options)
        reply = chunks[-1].response
        [call] = reply.tool_calls
        history = [
            UserMessage(content="weather?"),
            AssistantMessage(content=reply.content, tool_calls=reply.tool_calls),
            ToolMessage(call_id=call.call_id, content="3 C"),
        ]
        answered = await model.complete(history, options)
    deltas = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert {d.call_id for d in deltas} == {call.call_id} and call.arguments == {"city": "Oslo"}
    assert reply.finish_reason == "tool_calls"
    assert answered.text == "3 C in Oslo."


# -- tiers (#47.3) -------------------------------------------------------------------


async def test_tiers_served_named_and_priced() -> None:
    async with serve() as sim:
        model = bedrock(sim)
        served = {
            tier: await model.complete(ask("hi"), ModelOptions(service_tier=tier))
            for tier in ("default", "priority", "flex")
        }
        sent = [r.body["serviceTier"] for r in sim.requests]
    assert sent == [{"type": "default"}, {"type": "priority"}, {"type": "flex"}]
    standard = served["default"].usage.cost
    assert standard is not None
    for tier, times in (("priority", 1.75), ("flex", 0.5)):
        reply = served[tier]
        assert reply.service_tier == tier
        assert reply.usage.input_tokens == served["default"].usage.input_tokens
        assert reply.usage.cost is not None
        assert reply.usage.cost.total == pytest.approx(standard.total * times)


async def test_flex_refused_for_capacity_falls_back_through_tier() -> None:
    tier = raygent.Tier("flex", fallback="default")
    async with serve(tiers=ServiceTiers(flex_refusal_rate=1.0)) as sim:
        bot = raygent.agent(model=bedrock(sim, service_tier=tier))
        executed = await bot.execute("hi")
        streamed = await bot.stream("hi").result
        sent = [r.body["serviceTier"]["type"] for r in sim.requests]
        with pytest.raises(RateLimitError) as refused:
            await bedrock(sim, service_tier="flex").complete(ask("hi"))
    for result in (executed, streamed):
        assert result.ok, result.error
        [trip] = result.report.trips
        assert trip.usage.requests == 2  # the refusal counted, billed nothing
    assert sent == ["flex", "default", "flex", "default"]
    assert refused.value.for_capacity  # nobody pauses for it: not the key's rate

"""raygent's Bedrock wire with no adapter: bodies checked against botocore's service
model for Converse, sent signed by `AwsSigner` over real HTTP to the simulator (which
verifies the signature), replies and streams read back, errors typed, prices found."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import botocore.session
import httpx
import pytest
from botocore.validate import ParamValidator

from raygent.errors import (
    AuthenticationError,
    CapabilityError,
    ContentFilterError,
    ContextLengthExceededError,
    GuardrailInterventionError,
    InvalidRequestError,
    ProviderResponseError,
    ProviderTimeoutError,
    RateLimitError,
    ServerError,
)
from raygent.messages import (
    AssistantMessage,
    ImagePart,
    ProviderBlock,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from raygent.models import _bedrock_wire as wire
from raygent.models._aws import AwsSigner, endpoint_url, iter_event_stream, resolve_region
from raygent.models.contract import (
    CacheControl,
    Capabilities,
    ModelOptions,
    ReasoningDelta,
    ReasoningOptions,
    ResponseSchema,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
)
from raygent.pricing import Pricing
from raygent.sim import Fault, Match, Reply, Rule, ToolCallReply, serve
from raygent.sim._bedrock_auth import TEST_CREDENTIALS, TEST_SESSION_CREDENTIALS

CLAUDE = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
CAPS = Capabilities(reasoning=True, prompt_caching=True, structured_output=True)
_MODEL = botocore.session.get_session().get_service_model("bedrock-runtime")
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5E"
    "rkJggg=="
)
WEATHER = ToolSpec(
    name="get_weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    strict=True,
)
SCRIPT = [
    Rule(
        match=Match(last_user="weather", after_tool_result=False),
        reply=Reply(text="Checking.", tool_calls=[ToolCallReply("get_weather", {"city": "Oslo"})]),
    ),
    Rule(match=Match(last_user="think"), reply=Reply(thinking="Hmm, let me see.", text="42")),
    Rule(match=Match(last_user="forbidden"), reply=Reply(refusal="Blocked by policy.")),
    Rule(match=Match(last_user="busy"), reply=Reply(fault=Fault(kind="status", status=429))),
    Rule(
        match=Match(last_user="warming"),
        reply=Reply(
            fault=Fault(
                kind="status", status=429, headers={"x-amzn-ErrorType": "ModelNotReadyException"}
            )
        ),
    ),
    Rule(
        match=Match(last_user="midway"),
        reply=Reply(text="x" * 200, fault=Fault(kind="stream_error", after_chunks=3)),
    ),
]


def _valid(body: dict[str, Any], operation: str = "Converse", model: str = CLAUDE) -> None:
    """The body is a valid input of the operation, by botocore's own validator."""
    shape = _MODEL.operation_model(operation).input_shape
    report = ParamValidator().validate({"modelId": model, **body}, shape)
    assert not report.has_errors(), report.generate_report()


def _conversation() -> list[Any]:
    call = ToolCall.parse("tooluse_1", "get_weather", '{"city": "Oslo"}')
    reasoning = {"reasoningContent": {"reasoningText": {"text": "t", "signature": "s"}}}
    return [
        SystemMessage(content="Be brief."),
        UserMessage(content=[TextPart(text="Look:"), ImagePart(data=PNG, media_type="image/png")]),
        AssistantMessage(
            content=[ProviderBlock(provider="bedrock", kind="reasoningContent", data=reasoning)],
            tool_calls=[call],
        ),
        ToolMessage(call_id="tooluse_1", content="12 C"),
        UserMessage(
            content=[
                ProviderBlock(
                    provider="bedrock",
                    kind="document",
                    data={
                        "document": {"format": "txt", "name": "notes", "source": {"bytes": "aGk="}}
                    },
                ),
                ProviderBlock(provider="anthropic", kind="thinking", data={"type": "thinking"}),
                TextPart(text="and tomorrow?"),
            ]
        ),
    ]


def test_request_bodies_validate_against_botocores_converse_shape() -> None:
    options = ModelOptions(
        max_tokens=4000,
        temperature=0.3,
        tools=(WEATHER,),
        tool_choice="required",
        response_schema=ResponseSchema(schema={"type": "object"}, name="answer"),
        cache_control=CacheControl(breakpoints=3, ttl="1h"),
        service_tier="flex",
    )
    body = wire.request_body(CLAUDE, _conversation(), options, CAPS)
    _valid(body)
    _valid(body, "ConverseStream")
    assert body["system"] == [
        {"text": "Be brief."},
        {"cachePoint": {"type": "default", "ttl": "1h"}},
    ]
    user, assistant, results = body["messages"]
    assert user["content"][1]["image"] == {"format": "png", "source": {"bytes": PNG}}
    assert assistant["content"][0]["reasoningContent"]["reasoningText"]["signature"] == "s"
    assert results["content"][0] == {
        "toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "12 C"}]}
    }
    assert not any(
        "thinking" in json.dumps(b) for b in results["content"]
    )  # Anthropic's own left out
    assert body["toolConfig"]["toolChoice"] == {"any": {}}
    assert body["toolConfig"]["tools"][0]["toolSpec"]["strict"] is True
    assert json.loads(body["outputConfig"]["textFormat"]["structure"]["jsonSchema"]["schema"]) == {
        "type": "object"
    }
    assert body["serviceTier"] == {"type": "flex"}
    assert body["inferenceConfig"] == {"maxTokens": 4000, "temperature": 0.3}
    points = json.dumps(body).count("cachePoint")
    assert points == 3


def test_reasoning_budget_and_history_tools_without_options() -> None:
    options = ModelOptions(reasoning=ReasoningOptions(effort="low"), temperature=0.5)
    body = wire.request_body(CLAUDE, _conversation(), options, CAPS)
    _valid(body)
    assert body["additionalModelRequestFields"] == {
        "thinking": {"type": "enabled", "budget_tokens": 2048}
    }
    assert body["inferenceConfig"] == {"maxTokens": 2048 + 1024}  # no temperature with thinking
    # The history holds tool blocks: Bedrock wants a toolConfig even with no tools given.
    assert body["toolConfig"] == {
        "tools": [
            {"toolSpec": {"name": "get_weather", "inputSchema": {"json": {"type": "object"}}}}
        ]
    }
    llama = wire.request_body("meta.llama3-1-8b-instruct-v1:0", _conversation(), options, CAPS)
    assert "additionalModelRequestFields" not in llama


def test_images_bedrock_cannot_take_are_refused_before_sending() -> None:
    web = [UserMessage(content=[ImagePart(url="https://example.com/cat.png")])]
    tiff = [UserMessage(content=[ImagePart(data="AAAA", media_type="image/tiff")])]
    s3 = [UserMessage(content=[ImagePart(url="s3://bucket/cat.jpg")])]
    with pytest.raises(InvalidRequestError, match="s3://"):
        wire.request_body(CLAUDE, web, ModelOptions(), CAPS)
    with pytest.raises(InvalidRequestError, match="tiff"):
        wire.request_body(CLAUDE, tiff, ModelOptions(), CAPS)
    body = wire.request_body(CLAUDE, s3, ModelOptions(), CAPS)
    assert body["messages"][0]["content"][0]["image"]["format"] == "jpeg"
    _valid(body)


async def _post(
    http: httpx.AsyncClient, signer: AwsSigner, sim_url: str, body: dict[str, Any], *, stream: bool
) -> httpx.Response:
    url = sim_url + wire.converse_path(CLAUDE, stream=stream)
    raw = json.dumps(body).encode()
    headers = signer.sign("POST", url, {"Content-Type": "application/json"}, raw)
    request = http.build_request("POST", url, content=raw, headers=headers)
    return await http.send(request, stream=stream)


def _signer(**kwargs: Any) -> AwsSigner:
    keys = {"access_key": TEST_CREDENTIALS.access_key, "secret_key": TEST_CREDENTIALS.secret_key}
    return AwsSigner("us-east-1", **{**keys, **kwargs})


async def test_signed_requests_verified_and_replies_read() -> None:
    options = ModelOptions(tools=(WEATHER,))
    async with serve(SCRIPT) as sim, httpx.AsyncClient() as http:
        signer = _signer()
        messages = [UserMessage(content="weather in Oslo?")]
        first = await _post(
            http, signer, sim.url, wire.request_body(CLAUDE, messages, options, CAPS), stream=False
        )
        reply = wire.read_reply(first.json(), model=CLAUDE)
        messages += [
            reply.response.message,
            ToolMessage(call_id=reply.response.tool_calls[0].call_id, content="3 C"),
        ]
        second = await _post(
            http, signer, sim.url, wire.request_body(CLAUDE, messages, options, CAPS), stream=False
        )
        think = await _post(
            http,
            signer,
            sim.url,
            wire.request_body(CLAUDE, [UserMessage(content="think")], ModelOptions(), CAPS),
            stream=False,
        )
        thought = wire.read_reply(think.json()).response
        again = [UserMessage(content="think"), thought.message, UserMessage(content="more")]
        echoed = await _post(
            http,
            signer,
            sim.url,
            wire.request_body(CLAUDE, again, ModelOptions(), CAPS),
            stream=False,
        )
    assert first.status_code == 200, first.text
    assert reply.response.finish_reason == "tool_calls" and reply.stop_reason == "tool_use"
    assert reply.response.tool_calls[0].arguments == {"city": "Oslo"}
    assert reply.response.usage.input_tokens > 0 and not reply.response.usage.input_includes_cache
    assert (
        second.status_code == 200
        and wire.read_reply(second.json()).response.finish_reason == "stop"
    )
    block = thought.blocks[0]
    assert (
        block.kind == "reasoningContent"
        and block.data["reasoningContent"]["reasoningText"]["signature"]
    )
    assert echoed.status_code == 200, echoed.text  # the signature went back verbatim


async def test_wrong_secret_and_session_credentials() -> None:
    body = wire.request_body(CLAUDE, [UserMessage(content="hi")], ModelOptions(), CAPS)
    async with serve() as sim, httpx.AsyncClient() as http:
        wrong = await _post(http, _signer(secret_key="wrong"), sim.url, body, stream=False)
        session = AwsSigner(
            "us-east-1",
            access_key=TEST_SESSION_CREDENTIALS.access_key,
            secret_key=TEST_SESSION_CREDENTIALS.secret_key,
            session_token=TEST_SESSION_CREDENTIALS.session_token,
        )
        with_token = await _post(http, session, sim.url, body, stream=False)
        bearer = await _post(
            http,
            AwsSigner("us-east-1", bearer_token="bedrock-api-key-1"),
            sim.url,
            body,
            stream=False,
        )
        sent = sim.requests
    error = wire.error_from(wrong.status_code, wrong.headers, wrong.content)
    assert (
        isinstance(error, AuthenticationError)
        and error.provider_code == "InvalidSignatureException"
    )
    assert with_token.status_code == 200 and bearer.status_code == 200
    assert sent[1].headers["x-amz-security-token"] == TEST_SESSION_CREDENTIALS.session_token
    assert "Credential=ASIA" not in json.dumps([r.headers for r in sent])  # redacted


async def test_credentials_from_the_standard_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", TEST_SESSION_CREDENTIALS.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", TEST_SESSION_CREDENTIALS.secret_key)
    monkeypatch.setenv("AWS_SESSION_TOKEN", str(TEST_SESSION_CREDENTIALS.session_token))
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    monkeypatch.delenv("AWS_BEARER_TOKEN_BEDROCK", raising=False)
    region = resolve_region()
    signer = AwsSigner(region)
    revived = __import__("pickle").loads(__import__("pickle").dumps(signer))
    body = wire.request_body(CLAUDE, [UserMessage(content="hi")], ModelOptions(), CAPS)
    async with serve() as sim, httpx.AsyncClient() as http:
        reply = await _post(http, revived, sim.url, body, stream=False)
    assert region == "eu-west-3"
    assert reply.status_code == 200, reply.text
    assert endpoint_url("eu-west-3") == "https://bedrock-runtime.eu-west-3.amazonaws.com"
    assert endpoint_url("cn-north-1", "bedrock").endswith(".amazonaws.com.cn")
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "http://127.0.0.1:9/")
    assert endpoint_url("eu-west-3") == "http://127.0.0.1:9"


async def _chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    async for chunk in response.aiter_raw(7):  # small pieces: frames cross chunk bounds
        yield chunk


async def test_stream_decoded_into_chunks_and_a_final_reply() -> None:
    options = ModelOptions(tools=(WEATHER,))
    async with serve(SCRIPT) as sim, httpx.AsyncClient() as http:
        collected = []
        for text in ("weather?", "think"):
            body = wire.request_body(CLAUDE, [UserMessage(content=text)], options, CAPS)
            response = await _post(http, _signer(), sim.url, body, stream=True)
            state = wire.StreamState(model=CLAUDE, price=lambda u, t: wire.price(u, CLAUDE, tier=t))
            chunks = []
            async for event in iter_event_stream(_chunks(response)):
                chunks.extend(state.feed(event))
            await response.aclose()
            collected.append((chunks, state.done().response))
    (tool_chunks, tool_reply), (think_chunks, think_reply) = collected
    deltas = [c for c in tool_chunks if isinstance(c, ToolCallDelta)]
    assert json.loads("".join(d.arguments_delta for d in deltas)) == {"city": "Oslo"}
    assert tool_reply.tool_calls[0].arguments == {"city": "Oslo"}
    assert "".join(c.text for c in tool_chunks if isinstance(c, TextDelta)) == "Checking."
    assert tool_reply.usage.cost is not None and tool_reply.usage.cost.total > 0
    assert (
        "".join(c.text for c in think_chunks if isinstance(c, ReasoningDelta)) == "Hmm, let me see."
    )
    reasoning = think_reply.blocks[0].data["reasoningContent"]["reasoningText"]
    assert reasoning["text"] == "Hmm, let me see." and reasoning["signature"]


async def test_exceptions_inside_a_stream_and_a_cut_stream() -> None:
    body = wire.request_body(CLAUDE, [UserMessage(content="midway")], ModelOptions(), CAPS)
    async with serve(SCRIPT) as sim, httpx.AsyncClient() as http:
        response = await _post(http, _signer(), sim.url, body, stream=True)
        state = wire.StreamState()
        with pytest.raises(ServerError) as raised:
            async for event in iter_event_stream(_chunks(response)):
                state.feed(event)
        await response.aclose()
    assert raised.value.provider_code == "ModelStreamErrorException"
    assert not state.complete
    with pytest.raises(ProviderResponseError, match="ended before"):
        state.reply()


async def test_a_damaged_frame_is_a_named_error() -> None:
    from raygent.sim._bedrock_frames import event

    frame = bytearray(event("messageStart", {"role": "assistant"}))
    frame[-1] ^= 0xFF

    async def damaged() -> AsyncIterator[bytes]:
        yield bytes(frame)

    with pytest.raises(ProviderResponseError, match="ChecksumMismatch"):
        async for _ in iter_event_stream(damaged()):
            pass


def test_every_stop_reason_and_guardrail_errors() -> None:
    def reply(stop: str, **extra: Any) -> wire.Reply:
        data = {
            "output": {"message": {"role": "assistant", "content": [{"text": "Blocked."}]}},
            "stopReason": stop,
            "usage": {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5},
            "metrics": {"latencyMs": 1},
            **extra,
        }
        # The reply is one botocore's parser reads: every stop reason is in its enum.
        assert stop in _MODEL.shape_for("StopReason").enum
        return wire.read_reply(data)

    expected = {
        "end_turn": "stop",
        "stop_sequence": "stop",
        "tool_use": "tool_calls",
        "max_tokens": "length",
        "guardrail_intervened": "refusal",
        "content_filtered": "refusal",
        "model_context_window_exceeded": "context_exceeded",
        "malformed_model_output": "error",
        "malformed_tool_use": "error",
    }
    assert set(expected) == set(_MODEL.shape_for("StopReason").enum)
    for stop, finish in expected.items():
        assert reply(stop).response.finish_reason == finish
    trace = {"guardrail": {"inputAssessment": {"gr-7": {}}, "actionReason": "Guardrail blocked."}}
    guarded = reply("guardrail_intervened", trace=trace)
    error = wire.stop_error(guarded)
    assert isinstance(error, GuardrailInterventionError)
    assert (error.guardrail, error.action_reason, error.output) == (
        "gr-7",
        "Guardrail blocked.",
        "Blocked.",
    )
    assert guarded.response.refusal == "Blocked."
    assert type(wire.stop_error(reply("content_filtered"))) is ContentFilterError
    assert isinstance(wire.stop_error(reply("malformed_tool_use")), ProviderResponseError)
    assert wire.stop_error(reply("end_turn")) is None


@pytest.mark.parametrize(
    "data",
    [
        [],
        {"stopReason": "end_turn"},
        {"output": {"message": {"content": "text"}}, "stopReason": "end_turn"},
        {"output": {"message": {"content": [{"text": 3}]}}, "stopReason": "end_turn"},
        {
            "output": {"message": {"content": [{"text": "a", "image": {}}]}},
            "stopReason": "end_turn",
        },
        {
            "output": {"message": {"content": [{"toolUse": {"name": "f"}}]}},
            "stopReason": "end_turn",
        },
        {"output": {"message": {"content": [{"reasoningContent": {}}]}}, "stopReason": "end_turn"},
        {"output": {"message": {"content": []}}},
        {
            "output": {"message": {"content": []}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": -1},
        },
    ],
)
def test_malformed_replies_fail_with_a_named_error(data: Any) -> None:
    with pytest.raises(ProviderResponseError, match="bedrock: malformed reply"):
        wire.read_reply(data)


async def test_errors_from_the_simulator_are_typed() -> None:
    async with serve(SCRIPT, context_window=50) as sim, httpx.AsyncClient() as http:
        found = {}
        for text in ("busy", "warming", "x" * 400):
            body = wire.request_body(CLAUDE, [UserMessage(content=text)], ModelOptions(), CAPS)
            reply = await _post(http, _signer(), sim.url, body, stream=False)
            found[text[:7]] = wire.error_from(reply.status_code, reply.headers, reply.content)
    assert isinstance(found["busy"], RateLimitError) and found["busy"].retryable
    assert isinstance(found["warming"], ServerError) and found["warming"].retryable
    assert found["warming"].status == 429
    assert isinstance(found["xxxxxxx"], ContextLengthExceededError)


@pytest.mark.parametrize(
    ("kind", "status", "typed"),
    [
        ("ThrottlingException", 429, RateLimitError),
        ("ServiceUnavailableException", 503, ServerError),
        ("ModelNotReadyException", 429, ServerError),
        ("ValidationException", 400, InvalidRequestError),
        ("AccessDeniedException", 403, AuthenticationError),
        ("ResourceNotFoundException", 404, InvalidRequestError),
        ("ModelTimeoutException", 408, ProviderTimeoutError),
        ("ModelErrorException", 424, ServerError),
        ("InternalServerException", 500, ServerError),
        ("ServiceQuotaExceededException", 400, RateLimitError),
        ("ExpiredTokenException", 403, AuthenticationError),
    ],
)
def test_every_bedrock_error_type_maps(kind: str, status: int, typed: type[Exception]) -> None:
    headers = {"x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"}
    secret = TEST_CREDENTIALS.secret_key
    error = wire.error_from(
        status, headers, json.dumps({"message": f"bad {secret}"}).encode(), secrets=(secret,)
    )
    assert type(error) is typed
    assert error.provider_code == kind and secret not in str(error)
    if kind == "ServiceQuotaExceededException":
        assert not error.retryable
    by_body = wire.error_from(status, {}, json.dumps({"__type": kind, "message": "m"}).encode())
    assert type(by_body) is typed


def test_prices_from_genai_prices_for_bedrock_ids() -> None:
    usage = wire.usage_from(
        {
            "inputTokens": 1000,
            "outputTokens": 500,
            "totalTokens": 3500,
            "cacheReadInputTokens": 1000,
            "cacheWriteInputTokens": 1000,
            "cacheDetails": [{"ttl": "1h", "inputTokens": 1000}],
        }
    )
    online = wire.price(usage, CLAUDE)
    arn = wire.price(usage, f"arn:aws:bedrock:us-east-1:123456789012:inference-profile/{CLAUDE}")
    batch = wire.price(usage, CLAUDE, batch=True)
    flex = wire.price(usage, CLAUDE, tier="flex")
    declared = wire.price(usage, CLAUDE, declared=Pricing(input_per_mtok=1.0, output_per_mtok=2.0))
    unknown = wire.price(usage, "acme.unknown-model-v1:0")
    assert usage.total_input_tokens == 3000 and usage.cache_write_1h_tokens == 1000
    assert online.cost is not None
    assert online.cost.total == pytest.approx(arn.cost.total if arn.cost else 0)
    assert batch.cost is not None and batch.cost.total == pytest.approx(online.cost.total / 2)
    assert flex.cost is not None and flex.cost.total < online.cost.total
    assert declared.cost is not None and declared.cost.input == pytest.approx(0.001)
    assert unknown.cost is None


def test_batch_records_and_output_lines() -> None:
    messages = [SystemMessage(content="Be brief."), UserMessage(content="hello")]
    options = ModelOptions(tools=(WEATHER,), max_tokens=100)
    converse = wire.batch_record("R1", CLAUDE, messages, options, CAPS)
    _valid(converse["modelInput"])
    invoke = wire.batch_record("R2", CLAUDE, messages, options, CAPS, invocation_type="InvokeModel")
    assert invoke["modelInput"]["anthropic_version"] == "bedrock-2023-05-31"
    assert "model" not in invoke["modelInput"] and invoke["modelInput"]["max_tokens"] == 100
    with pytest.raises(CapabilityError):
        wire.batch_record(
            "R3",
            "meta.llama3-1-8b-instruct-v1:0",
            messages,
            options,
            CAPS,
            invocation_type="InvokeModel",
        )
    ok = {
        "recordId": "R1",
        "modelInput": {},
        "modelOutput": {
            "output": {"message": {"role": "assistant", "content": [{"text": "hi"}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
        },
    }
    claude = {
        "recordId": "R2",
        "modelInput": {},
        "modelOutput": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "t", "signature": "s"},
                {"type": "text", "text": "yo"},
            ],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 2, "output_tokens": 3},
        },
    }
    failed = {
        "recordId": "R3",
        "modelInput": {},
        "error": {"errorCode": 429, "errorMessage": "Too many requests"},
    }
    record, first = wire.read_batch_line(json.dumps(ok))
    _, second = wire.read_batch_line(json.dumps(claude).encode())
    _, third = wire.read_batch_line(json.dumps(failed))
    assert record == "R1" and not isinstance(first, Exception) and first.text == "hi"
    assert not isinstance(second, Exception) and second.text == "yo"
    assert second.blocks[0].data == {
        "reasoningContent": {"reasoningText": {"text": "t", "signature": "s"}}
    }
    assert isinstance(third, RateLimitError)
    with pytest.raises(ProviderResponseError):
        wire.read_batch_line('{"recordId": "R4"}')


def test_converse_path_encodes_arns_as_boto3_does() -> None:
    arn = f"arn:aws:bedrock:us-east-1:123456789012:inference-profile/{CLAUDE}"
    assert wire.converse_path(arn, stream=True) == (
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2F"
        "us.anthropic.claude-haiku-4-5-20251001-v1%3A0/converse-stream"
    )


def test_the_wire_leaves_botocore_to_the_first_signed_request() -> None:
    code = (
        "import sys, raygent, raygent.models._bedrock_wire, raygent.models._aws;"
        "print('botocore' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_redacted_reasoning_reads_back() -> None:
    data = {
        "output": {
            "message": {
                "role": "assistant",
                "content": [
                    {"reasoningContent": {"redactedContent": base64.b64encode(b"x").decode()}}
                ],
            }
        },
        "stopReason": "end_turn",
    }
    block = wire.read_reply(data).response.blocks[0]
    sent = wire.request_body(
        CLAUDE,
        [UserMessage(content="a"), AssistantMessage(content=[block]), UserMessage(content="b")],
        ModelOptions(),
        CAPS,
    )
    assert sent["messages"][1]["content"] == [data["output"]["message"]["content"][0]]
    _valid(sent)

"""boto3's own bedrock-runtime client against the simulator: Converse and ConverseStream
read by botocore's parsers (the event stream by its own parser), every signature
verified by the simulator."""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote

import botocore.exceptions
import httpx
import pytest
from bedrock_helpers import CLAUDE, Boto, events, user
from botocore.eventstream import EventStreamBuffer

from raygent.sim import (
    Fault,
    Match,
    Reply,
    Rule,
    ServiceTiers,
    SimRateLimits,
    ToolCallReply,
    serve,
)
from raygent.sim._bedrock_auth import TEST_CREDENTIALS, TEST_SESSION_CREDENTIALS, AwsTestCredentials

TOOLS = {
    "tools": [
        {
            "toolSpec": {
                "name": "get_weather",
                "description": "Weather for a city",
                "inputSchema": {"json": {"type": "object", "properties": {"city": {}}}},
            }
        }
    ]
}
SCRIPT = [
    Rule(
        match=Match(last_user="weather", after_tool_result=False),
        reply=Reply(text="Checking.", tool_calls=[ToolCallReply("get_weather", {"city": "Paris"})]),
    ),
    Rule(match=Match(last_user="think"), reply=Reply(thinking="Step by step.", text="42")),
    Rule(match=Match(last_user="hidden"), reply=Reply(redacted_thinking="opaque", text="ok")),
    Rule(match=Match(last_user="forbidden"), reply=Reply(refusal="Sorry, I cannot help.")),
    Rule(match=Match(last_user="story"), reply=Reply(text="Once upon a time. THE END. More.")),
]


def _error(call: Any) -> botocore.exceptions.ClientError:
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        call()
    return caught.value


def _code(error: botocore.exceptions.ClientError) -> str:
    return str(error.response["Error"]["Code"])


def test_text_reply_and_usage_read_by_boto3(boto: Boto) -> None:
    with serve() as sim:
        reply = boto.runtime(sim).converse(modelId=CLAUDE, messages=user("Hello there"))
        stats = sim.stats()
    assert reply["output"]["message"]["content"] == [{"text": "Simulated reply to: Hello there"}]
    assert reply["stopReason"] == "end_turn"
    usage = reply["usage"]
    assert usage["inputTokens"] > 0 and usage["outputTokens"] > 0
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]
    assert reply["metrics"]["latencyMs"] > 0
    assert stats.by_api == {"bedrock": 1} and stats.by_status == {200: 1}


def test_model_ids_profiles_and_arns_are_the_request_model(boto: Boto) -> None:
    arn = f"arn:aws:bedrock:us-east-1:123456789012:inference-profile/{CLAUDE}"
    script = [Rule(match=Match(model="inference-profile/us\\.anthropic"), reply=Reply(text="arn"))]
    with serve(script) as sim:
        bedrock = boto.runtime(sim)
        by_arn = bedrock.converse(modelId=arn, messages=user("x"))
        by_id = bedrock.converse(
            modelId="anthropic.claude-3-haiku-20240307-v1:0", messages=user("x")
        )
        paths = [r.path for r in sim.requests]
    assert by_arn["output"]["message"]["content"] == [{"text": "arn"}]
    assert by_id["output"]["message"]["content"][0]["text"].startswith("Simulated")
    assert paths[0] == f"/model/{arn}/converse"  # boto3 sent it URL-encoded whole


def test_tool_use_then_tool_result_by_id(boto: Boto) -> None:
    with serve(SCRIPT) as sim:
        bedrock = boto.runtime(sim)
        first = bedrock.converse(modelId=CLAUDE, messages=user("weather?"), toolConfig=TOOLS)
        assert first["stopReason"] == "tool_use"
        use = first["output"]["message"]["content"][1]["toolUse"]
        assert use["name"] == "get_weather" and use["input"] == {"city": "Paris"}
        result = {"toolResult": {"toolUseId": use["toolUseId"], "content": [{"json": {"t": 21}}]}}
        history = [
            *user("weather?"),
            first["output"]["message"],
            {"role": "user", "content": [result]},
        ]
        second = bedrock.converse(modelId=CLAUDE, messages=history, toolConfig=TOOLS)
        wrong = {"toolResult": {"toolUseId": "tooluse_other", "content": [{"text": "x"}]}}
        bad = [*history[:2], {"role": "user", "content": [wrong]}]
        refused = _error(lambda: bedrock.converse(modelId=CLAUDE, messages=bad, toolConfig=TOOLS))
        no_config = _error(lambda: bedrock.converse(modelId=CLAUDE, messages=history))
    assert second["stopReason"] == "end_turn"
    assert _code(refused) == "ValidationException"
    assert use["toolUseId"] in refused.response["Error"]["Message"]
    assert "toolConfig field must be defined" in no_config.response["Error"]["Message"]


def test_reasoning_signature_goes_back_verbatim_or_is_refused(boto: Boto) -> None:
    with serve(SCRIPT) as sim:
        bedrock = boto.runtime(sim)
        first = bedrock.converse(modelId=CLAUDE, messages=user("think"))
        reasoning = first["output"]["message"]["content"][0]["reasoningContent"]["reasoningText"]
        history = [*user("think"), first["output"]["message"], *user("and then?")]
        again = bedrock.converse(modelId=CLAUDE, messages=history)
        tampered = json.loads(json.dumps(history))
        tampered[1]["content"][0]["reasoningContent"]["reasoningText"]["text"] = "edited"
        refused = _error(lambda: bedrock.converse(modelId=CLAUDE, messages=tampered))
        hidden = bedrock.converse(modelId=CLAUDE, messages=user("hidden"))
    assert reasoning["text"] == "Step by step." and reasoning["signature"]
    assert again["stopReason"] == "end_turn"
    assert "Invalid `signature`" in refused.response["Error"]["Message"]
    redacted = hidden["output"]["message"]["content"][0]["reasoningContent"]["redactedContent"]
    assert redacted == b"opaque"  # a blob: botocore decoded the base64


def test_structured_output_follows_the_schema(boto: Boto) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    output = {
        "textFormat": {
            "type": "json_schema",
            "structure": {"jsonSchema": {"schema": json.dumps(schema), "name": "person"}},
        }
    }
    with serve() as sim:
        bedrock = boto.runtime(sim)
        reply = bedrock.converse(modelId=CLAUDE, messages=user("who?"), outputConfig=output)
        broken = {
            "textFormat": {
                "type": "json_schema",
                "structure": {"jsonSchema": {"schema": "{not json"}},
            }
        }
        refused = _error(
            lambda: bedrock.converse(modelId=CLAUDE, messages=user("x"), outputConfig=broken)
        )
    value = json.loads(reply["output"]["message"]["content"][0]["text"])
    assert set(value) == {"name", "age"} and isinstance(value["age"], int)
    assert _code(refused) == "ValidationException"


def test_cache_points_write_then_read(boto: Boto) -> None:
    system = [{"text": "You are terse. " * 200}, {"cachePoint": {"type": "default"}}]
    with serve() as sim:
        bedrock = boto.runtime(sim)
        first = bedrock.converse(modelId=CLAUDE, messages=user("a"), system=system)["usage"]
        second = bedrock.converse(modelId=CLAUDE, messages=user("b"), system=system)["usage"]
        long = [system[0], {"cachePoint": {"type": "default", "ttl": "1h"}}]
        third = bedrock.converse(modelId=CLAUDE, messages=user("c"), system=long)["usage"]
        plain = bedrock.converse(modelId=CLAUDE, messages=user("d"))["usage"]
    assert first["cacheWriteInputTokens"] > 0 and first["cacheReadInputTokens"] == 0
    assert first["cacheDetails"] == [{"ttl": "5m", "inputTokens": first["cacheWriteInputTokens"]}]
    assert second["cacheReadInputTokens"] == first["cacheWriteInputTokens"]
    assert second["cacheWriteInputTokens"] == 0
    assert second["inputTokens"] < first["inputTokens"] + first["cacheWriteInputTokens"]
    assert third["cacheReadInputTokens"] == first["cacheWriteInputTokens"]  # same prefix
    assert "cacheReadInputTokens" not in plain  # no cache point, no cache fields


def test_stop_reasons_max_tokens_stop_sequence_and_filters(boto: Boto) -> None:
    guardrail = {"guardrailIdentifier": "gr-1", "guardrailVersion": "1", "trace": "enabled"}
    with serve(SCRIPT) as sim:
        bedrock = boto.runtime(sim)
        cut = bedrock.converse(
            modelId=CLAUDE, messages=user("story"), inferenceConfig={"maxTokens": 2}
        )
        seq = bedrock.converse(
            modelId=CLAUDE, messages=user("story"), inferenceConfig={"stopSequences": ["THE END"]}
        )
        filtered = bedrock.converse(modelId=CLAUDE, messages=user("forbidden"))
        guarded = bedrock.converse(
            modelId=CLAUDE, messages=user("forbidden"), guardrailConfig=guardrail
        )
    assert cut["stopReason"] == "max_tokens"
    assert seq["stopReason"] == "stop_sequence"
    assert seq["output"]["message"]["content"] == [{"text": "Once upon a time. "}]
    assert filtered["stopReason"] == "content_filtered"
    assert guarded["stopReason"] == "guardrail_intervened"
    trace = guarded["trace"]["guardrail"]
    assert trace["modelOutput"] == ["Sorry, I cannot help."]
    assert trace["inputAssessment"]["gr-1"]["contentPolicy"]["filters"][0]["action"] == "BLOCKED"


def test_images_and_documents_in_content(boto: Boto) -> None:
    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    )
    content = [
        {"text": "describe both"},
        {"image": {"format": "png", "source": {"bytes": png}}},
        {"document": {"format": "txt", "name": "notes (v2)", "source": {"bytes": b"hello"}}},
        {"image": {"format": "png", "source": {"s3Location": {"uri": "s3://bucket/cat.png"}}}},
    ]
    with serve() as sim:
        bedrock = boto.runtime(sim)
        reply = bedrock.converse(modelId=CLAUDE, messages=[{"role": "user", "content": content}])
        plain = bedrock.converse(modelId=CLAUDE, messages=user("describe both"))
        bad_name = [{"document": {"format": "txt", "name": "a  b", "source": {"bytes": b"x"}}}]
        refused = _error(
            lambda: bedrock.converse(
                modelId=CLAUDE, messages=[{"role": "user", "content": bad_name}]
            )
        )
    media = reply["usage"]["inputTokens"] - plain["usage"]["inputTokens"]
    assert media == 3 * 85  # each media block counts the simulator's fixed amount
    assert _code(refused) == "ValidationException"


def test_bad_shapes_are_bedrock_validation_errors(boto: Boto) -> None:
    sent: list[list[dict[str, Any]]] = [
        [{"role": "assistant", "content": [{"text": "hi"}]}],
        [*user("a"), *user("b")],
        [{"role": "user", "content": [{"text": "  "}]}],
        [{"role": "user", "content": []}],
    ]
    with serve() as sim:
        bedrock = boto.runtime(sim)
        errors = [_error(lambda m=m: bedrock.converse(modelId=CLAUDE, messages=m)) for m in sent]
        think = {"thinking": {"type": "enabled", "budget_tokens": 2000}}
        budget = _error(
            lambda: bedrock.converse(
                modelId=CLAUDE,
                messages=user("x"),
                inferenceConfig={"maxTokens": 1000},
                additionalModelRequestFields=think,
            )
        )
    assert [_code(e) for e in errors] == ["ValidationException"] * 4
    assert "start with a user message" in errors[0].response["Error"]["Message"]
    assert "alternate" in errors[1].response["Error"]["Message"]
    assert "blank" in errors[2].response["Error"]["Message"]
    assert "budget_tokens" in budget.response["Error"]["Message"]
    assert all(e.response["ResponseMetadata"]["HTTPStatusCode"] == 400 for e in errors)


def test_stream_events_parsed_by_botocore(boto: Boto) -> None:
    with serve(SCRIPT) as sim:
        bedrock = boto.runtime(sim)
        tool_events = events(
            bedrock.converse_stream(modelId=CLAUDE, messages=user("weather?"), toolConfig=TOOLS)
        )
        think_events = events(bedrock.converse_stream(modelId=CLAUDE, messages=user("think")))
        stats = sim.stats()
    kinds = [next(iter(e)) for e in tool_events]
    assert kinds[0] == "messageStart" and kinds[-2:] == ["messageStop", "metadata"]
    assert kinds.count("contentBlockStart") == 1  # only the tool use has a start
    start = next(e["contentBlockStart"] for e in tool_events if "contentBlockStart" in e)
    index = start["contentBlockIndex"]
    pieces = [
        e["contentBlockDelta"]["delta"]["toolUse"]["input"]
        for e in tool_events
        if "contentBlockDelta" in e and e["contentBlockDelta"]["contentBlockIndex"] == index
    ]
    assert json.loads("".join(pieces)) == {"city": "Paris"}
    assert tool_events[-2]["messageStop"]["stopReason"] == "tool_use"
    assert tool_events[-1]["metadata"]["usage"]["outputTokens"] > 0
    deltas = [e["contentBlockDelta"]["delta"] for e in think_events if "contentBlockDelta" in e]
    reasoning = [d["reasoningContent"] for d in deltas if "reasoningContent" in d]
    assert "".join(r.get("text", "") for r in reasoning) == "Step by step."
    assert reasoning[-1]["signature"]
    assert stats.streams == 2


def test_stream_frames_are_aws_event_stream_with_crcs(boto: Boto) -> None:
    with serve() as sim:
        bedrock = boto.runtime(sim)
        reply = bedrock.converse_stream(modelId=CLAUDE, messages=user("hi"))
        assert reply["ResponseMetadata"]["HTTPHeaders"]["content-type"] == (
            "application/vnd.amazon.eventstream"
        )
        buffer = EventStreamBuffer()
        buffer.add_data(reply["stream"]._raw_stream.read())
        messages = list(buffer)
    headers = [m.headers for m in messages]
    assert all(
        h[":message-type"] == "event" and h[":content-type"] == "application/json" for h in headers
    )
    assert [h[":event-type"] for h in headers][:1] == ["messageStart"]
    assert headers[-1][":event-type"] == "metadata"


def test_exception_inside_a_stream(boto: Boto) -> None:
    script = [
        Rule(
            reply=Reply(
                text="a fairly long answer " * 5,
                fault=Fault(
                    kind="stream_error",
                    after_chunks=2,
                    body={"__type": "throttlingException", "message": "slow down"},
                ),
            )
        )
    ]
    plain = [Rule(reply=Reply(text="x" * 80, fault=Fault(kind="stream_error", after_chunks=1)))]
    with serve(script) as sim:
        stream = boto.runtime(sim).converse_stream(modelId=CLAUDE, messages=user("go"))["stream"]
        seen = []
        with pytest.raises(botocore.exceptions.EventStreamError) as caught:
            for event in stream:
                seen.append(next(iter(event)))
        stream.close()  # a stream cut by an exception leaves its connection to close
    with serve(plain) as sim:
        stream = boto.runtime(sim).converse_stream(modelId=CLAUDE, messages=user("go"))["stream"]
        with pytest.raises(botocore.exceptions.EventStreamError) as model_error:
            list(stream)
        stream.close()
    assert seen[0] == "messageStart" and "messageStop" not in seen
    assert caught.value.response["Error"] == {"Code": "throttlingException", "Message": "slow down"}
    assert model_error.value.response["Error"]["Code"] == "modelStreamErrorException"


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        (Fault(kind="status", status=429), "ThrottlingException"),
        (Fault(kind="status", status=503), "ServiceUnavailableException"),
        (Fault(kind="status", status=500), "InternalServerException"),
        (Fault(kind="status", status=408), "ModelTimeoutException"),
        (Fault(kind="status", status=424), "ModelErrorException"),
        (Fault(kind="status", status=403), "AccessDeniedException"),
        (Fault(kind="status", status=404), "ResourceNotFoundException"),
        (
            Fault(
                kind="status", status=429, headers={"x-amzn-ErrorType": "ModelNotReadyException"}
            ),
            "ModelNotReadyException",
        ),
        (
            Fault(
                kind="status",
                status=429,
                body={"__type": "ModelNotReadyException", "message": "warming"},
            ),
            "ModelNotReadyException",
        ),
        (Fault(kind="context_exceeded"), "ValidationException"),
    ],
)
def test_faults_are_bedrock_errors(boto: Boto, fault: Fault, expected: str) -> None:
    with serve([Rule(reply=Reply(fault=fault))]) as sim:
        error = _error(lambda: boto.runtime(sim).converse(modelId=CLAUDE, messages=user("x")))
    assert _code(error) == expected
    assert error.response["Error"]["Message"]
    headers = error.response["ResponseMetadata"]["HTTPHeaders"]
    assert "x-amzn-requestid" in headers
    assert not any(h.startswith(("x-ratelimit", "retry-after")) for h in headers)


def test_rate_limits_and_concurrency_answer_throttling(boto: Boto) -> None:
    with serve(rate_limits=SimRateLimits(requests_per_minute=1, burst_seconds=1)) as sim:
        bedrock = boto.runtime(sim)
        bedrock.converse(modelId=CLAUDE, messages=user("a"))
        limited = _error(lambda: bedrock.converse(modelId=CLAUDE, messages=user("b")))
        streamed = _error(lambda: bedrock.converse_stream(modelId=CLAUDE, messages=user("c")))
        stats = sim.stats()
    assert _code(limited) == "ThrottlingException"
    assert (
        limited.response["Error"]["Message"]
        == "Too many requests, please wait before trying again."
    )
    assert _code(streamed) == "ThrottlingException"
    assert stats.rate_limited == {"requests": 2}
    assert not any(
        h.startswith("x-ratelimit") for h in limited.response["ResponseMetadata"]["HTTPHeaders"]
    )


def test_service_tiers_and_flex_refused_for_capacity(boto: Boto) -> None:
    tiers = ServiceTiers(flex_refusal_rate=1.0)
    with serve(tiers=tiers) as sim:
        bedrock = boto.runtime(sim)
        priority = bedrock.converse(
            modelId=CLAUDE, messages=user("a"), serviceTier={"type": "priority"}
        )
        flex = _error(
            lambda: bedrock.converse(
                modelId=CLAUDE, messages=user("b"), serviceTier={"type": "flex"}
            )
        )
        plain = bedrock.converse(modelId=CLAUDE, messages=user("c"))
        unknown = _error(
            lambda: bedrock.converse(
                modelId=CLAUDE, messages=user("d"), serviceTier={"type": "gold"}
            )
        )
    assert priority["serviceTier"] == {"type": "priority"}
    assert "serviceTier" not in plain
    assert _code(flex) == "ThrottlingException"
    assert "Resource Unavailable" in flex.response["Error"]["Message"]
    assert _code(unknown) == "ValidationException"


def test_every_request_signature_is_checked(boto: Boto) -> None:
    wrong = AwsTestCredentials(TEST_CREDENTIALS.access_key, "not-the-secret")
    with serve(api_key=TEST_CREDENTIALS.access_key) as sim:
        signed = boto.runtime(sim).converse(modelId=CLAUDE, messages=user("a"))
        session = boto.runtime(sim, TEST_SESSION_CREDENTIALS)
        other_key = _error(lambda: session.converse(modelId=CLAUDE, messages=user("a")))
        mismatch = _error(
            lambda: boto.runtime(sim, wrong).converse(modelId=CLAUDE, messages=user("a"))
        )
        with httpx.Client(base_url=sim.url) as http:
            path = f"/model/{quote(CLAUDE, safe='')}/converse"
            body = {"messages": user("a")}
            anonymous = http.post(path, json=body)
            scope = "AKIASIMULATOR0000001/20260101/us-east-1/s3/aws4_request"
            forged = http.post(
                path,
                json=body,
                headers={
                    "Authorization": f"AWS4-HMAC-SHA256 Credential={scope}, "
                    f"SignedHeaders=host;x-amz-date, Signature={'0' * 64}",
                    "X-Amz-Date": "20260101T000000Z",
                },
            )
        records = sim.requests
    assert signed["stopReason"] == "end_turn"
    assert _code(other_key) == "UnrecognizedClientException"  # not the simulator's key
    assert _code(mismatch) == "InvalidSignatureException"
    assert anonymous.status_code == 403
    assert anonymous.headers["x-amzn-ErrorType"].startswith("MissingAuthenticationTokenException")
    assert forged.status_code == 403 and "correct service" in forged.json()["message"]
    assert all(r.headers.get("authorization", "[redacted]") == "[redacted]" for r in records)


def test_session_credentials_need_their_token(boto: Boto) -> None:
    no_token = AwsTestCredentials(
        TEST_SESSION_CREDENTIALS.access_key, TEST_SESSION_CREDENTIALS.secret_key
    )
    with serve() as sim:
        ok = boto.runtime(sim, TEST_SESSION_CREDENTIALS).converse(
            modelId=CLAUDE, messages=user("a")
        )
        refused = _error(
            lambda: boto.runtime(sim, no_token).converse(modelId=CLAUDE, messages=user("a"))
        )
        token = sim.requests[0].headers.get("x-amz-security-token")
    assert ok["stopReason"] == "end_turn"
    assert token == TEST_SESSION_CREDENTIALS.session_token
    assert _code(refused) == "UnrecognizedClientException"


def test_unknown_runtime_operation_is_bedrock_404(boto: Boto) -> None:
    with serve() as sim, httpx.Client(base_url=sim.url) as http:
        reply = http.post("/model/m/invoke-agent", json={})
    assert reply.status_code == 404
    assert reply.headers["x-amzn-ErrorType"] == "UnknownOperationException"

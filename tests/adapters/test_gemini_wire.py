"""The Gemini wire module: its request bodies validate against google-genai's types
(which forbid unknown fields), every reply shape the simulator sends is read, malformed
shapes fail with a named error, and thought signatures survive raygent's messages and
come back byte for byte through the simulator's check."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from google.genai import types

from raygent.errors import (
    ContentBlockedError,
    InvalidOptionsError,
    ProviderResponseError,
    RecitationError,
)
from raygent.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    ProviderBlock,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
    messages_from_json,
    messages_from_msgpack,
    messages_to_json,
    messages_to_msgpack,
)
from raygent.models import _gemini_wire as wire
from raygent.models.contract import (
    Capabilities,
    ModelOptions,
    ReasoningDelta,
    ReasoningOptions,
    ResponseSchema,
    TextDelta,
    Tier,
    ToolCallDelta,
    ToolSpec,
    UsageChunk,
)
from raygent.sim import Reply, ServerToolReply, Simulator, ToolCallReply, serve

FLASH = "gemini-2.5-flash"
G3 = "gemini-3-flash-preview"
CAPS = Capabilities(reasoning=True)
WEATHER = ToolSpec(
    name="get_weather",
    description="The weather of a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
TWO_CALLS = Reply(
    thinking="Two cities, so two calls.",
    tool_calls=[
        ToolCallReply("get_weather", {"city": "Paris"}),
        ToolCallReply("get_weather", {"city": "Rome"}),
    ],
)
_FIELDS: dict[str, Any] = {
    "contents": types.Content,
    "systemInstruction": types.Content,
    "tools": types.Tool,
    "toolConfig": types.ToolConfig,
    "generationConfig": types.GenerationConfig,
    "cachedContent": str,
    "serviceTier": types.ServiceTier,
}


def assert_sdk_body(body: dict[str, Any]) -> None:
    """Each field of a request body read by google-genai's type of that field: an
    unknown key at any depth fails (the SDK's models forbid extras), and so does a
    mistyped value (pytest turns the SDK's type warnings into errors)."""
    for key, value in body.items():
        kind = _FIELDS[key]  # a top-level field the API does not have: KeyError
        for item in value if isinstance(value, list) else [value]:
            if kind is str:
                assert isinstance(item, str)
            elif isinstance(kind, type) and issubclass(kind, types._common.BaseModel):
                kind.model_validate(item)
            else:
                kind(item)


def body(model: str, messages: list[Message], **options: Any) -> dict[str, Any]:
    made = wire.request_body(model, messages, ModelOptions(**options), CAPS)
    assert_sdk_body(made)
    return made


def generate(
    sim: Simulator, model: str, payload: dict[str, Any], *, stream: bool = False
) -> httpx.Response:
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    return httpx.post(f"{sim.url}/v1beta/models/{model}:{method}", json=payload, timeout=10)


def events(response: httpx.Response) -> list[dict[str, Any]]:
    blocks = response.text.replace("\r\n", "\n").split("\n\n")
    return [json.loads(b[6:]) for b in blocks if b.startswith("data: ")]


# ------------------------------------------------------------------ request bodies


def test_a_full_request_body_validates_against_the_sdk_types() -> None:
    messages: list[Message] = [
        SystemMessage(content="Be brief."),
        UserMessage(
            content=[TextPart(text="Look:"), ImagePart(data="aGk=", media_type="image/png")]
        ),
        UserMessage(content=[ImagePart(url="https://example.com/cat.jpg")]),
    ]
    made = body(
        G3,
        messages,
        temperature=0.2,
        max_tokens=100,
        tools=(WEATHER,),
        tool_choice="required",
        response_schema=ResponseSchema(
            schema={"type": "object", "properties": {"n": {"type": "integer"}}}
        ),
        reasoning=ReasoningOptions(effort="low"),
        service_tier=Tier("flex", fallback="standard"),
    )
    assert made["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert made["contents"] == [
        {
            "role": "user",
            "parts": [
                {"text": "Look:"},
                {"inlineData": {"mimeType": "image/png", "data": "aGk="}},
                {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/cat.jpg"}},
            ],
        }
    ]
    assert made["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"] == WEATHER.parameters
    assert made["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    config = made["generationConfig"]
    assert config["responseMimeType"] == "application/json" and "responseJsonSchema" in config
    assert config["thinkingConfig"] == {"includeThoughts": True, "thinkingLevel": "low"}
    assert config["maxOutputTokens"] == 100 and config["temperature"] == 0.2
    assert made["serviceTier"] == "flex"


def test_older_models_get_the_openapi_subset() -> None:
    schema = {
        "type": "object",
        "properties": {"tag": {"$ref": "#/$defs/Tag"}, "note": {"type": ["string", "null"]}},
        "required": ["tag"],
        "additionalProperties": False,
        "$defs": {"Tag": {"enum": ["a", "b"]}},
    }
    made = body(
        "gemini-2.0-flash",
        [UserMessage(content="x")],
        response_schema=ResponseSchema(schema=schema),
        tools=(WEATHER,),
    )
    converted = made["generationConfig"]["responseSchema"]
    assert converted == {
        "type": "OBJECT",
        "properties": {
            "tag": {"enum": ["a", "b"], "type": "STRING"},
            "note": {"type": "STRING", "nullable": True},
        },
        "required": ["tag"],
    }
    assert made["tools"][0]["functionDeclarations"][0]["parameters"]["type"] == "OBJECT"


def test_thinking_budget_on_gemini_2_5_and_an_explicit_budget_anywhere() -> None:
    assert body(FLASH, [UserMessage(content="x")], reasoning=ReasoningOptions(effort="high"))[
        "generationConfig"
    ]["thinkingConfig"] == {"includeThoughts": True, "thinkingBudget": 24576}
    assert body(G3, [UserMessage(content="x")], reasoning=ReasoningOptions(max_tokens=300))[
        "generationConfig"
    ]["thinkingConfig"] == {"includeThoughts": True, "thinkingBudget": 300}
    plain = wire.request_body(
        FLASH,
        [UserMessage(content="x")],
        ModelOptions(reasoning=ReasoningOptions()),
        Capabilities(),
    )
    assert "generationConfig" not in plain  # no reasoning capability: nothing sent


def test_cached_content_leaves_system_and_tools_to_the_cache() -> None:
    made = body(FLASH, [SystemMessage(content="s"), UserMessage(content="q")], tools=(WEATHER,))
    assert "tools" in made and "systemInstruction" in made
    cached = wire.request_body(
        FLASH,
        [SystemMessage(content="s"), UserMessage(content="q")],
        ModelOptions(tools=(WEATHER,)),
        CAPS,
        cached_content="cachedContents/abc",
    )
    assert_sdk_body(cached)
    assert cached["cachedContent"] == "cachedContents/abc"
    assert "tools" not in cached and "systemInstruction" not in cached


def test_a_tier_gemini_does_not_have_is_refused_before_sending() -> None:
    with pytest.raises(InvalidOptionsError, match="not a Gemini tier"):
        wire.request_body(
            FLASH, [UserMessage(content="x")], ModelOptions(service_tier="default"), CAPS
        )


def test_provider_options_merge_into_the_body() -> None:
    options = ModelOptions(
        max_tokens=5,
        provider_options={"gemini": {"generationConfig": {"topK": 3}}, "openai": {"x": 1}},
    )
    made = wire.request_body(FLASH, [UserMessage(content="x")], options, CAPS)
    assert made["generationConfig"] == {"maxOutputTokens": 5, "topK": 3}
    assert_sdk_body(made)


def test_tool_results_go_in_one_user_turn_and_foreign_calls_get_the_skip_signature() -> None:
    history: list[Message] = [
        UserMessage(content="weather in two cities?"),
        AssistantMessage(
            content=[
                ProviderBlock(provider="anthropic", kind="thinking", data={"type": "thinking"})
            ],
            tool_calls=[
                ToolCall.parse("toolu_1", "get_weather", '{"city": "Paris"}'),
                ToolCall.parse("toolu_2", "get_weather", '{"city": "Rome"}'),
            ],
        ),
        ToolMessage(content="sunny", call_id="toolu_1"),
        ToolMessage(content="failed", call_id="toolu_2", is_error=True),
    ]
    made = body(G3, history)
    model_turn, results = made["contents"][1], made["contents"][2]
    assert model_turn["parts"][0]["thoughtSignature"] == wire.SKIP_SIGNATURE
    assert "thoughtSignature" not in model_turn["parts"][1]
    assert results == {
        "role": "user",
        "parts": [
            {
                "functionResponse": {
                    "id": "toolu_1",
                    "name": "get_weather",
                    "response": {"result": "sunny"},
                }
            },
            {
                "functionResponse": {
                    "id": "toolu_2",
                    "name": "get_weather",
                    "response": {"error": "failed"},
                }
            },
        ],
    }
    assert "thoughtSignature" not in body(FLASH, history)["contents"][1]["parts"][0]


# ------------------------------------------------------------------------- replies


def test_text_reply_with_usage_and_tier() -> None:
    with serve({"default": "Hello."}) as sim:
        response = generate(sim, FLASH, body(FLASH, [UserMessage(content="hi")]))
        reply = wire.read_reply(
            response.json(), tier_header=response.headers["x-gemini-service-tier"]
        )
    assert reply.content == [TextPart(text="Hello.")]
    assert (reply.finish_reason, reply.service_tier, reply.model) == ("stop", "standard", FLASH)
    assert reply.usage.input_tokens == response.json()["usageMetadata"]["promptTokenCount"]
    assert reply.usage.output_tokens == 2 and reply.usage.requests == 1


def test_calls_thoughts_and_signatures_are_read_into_blocks() -> None:
    with serve({"default": TWO_CALLS.model_dump(by_alias=True)}) as sim:
        made = body(
            G3, [UserMessage(content="weather?")], tools=(WEATHER,), reasoning=ReasoningOptions()
        )
        raw = generate(sim, G3, made).json()
    reply = wire.read_reply(raw)
    parts = raw["candidates"][0]["content"]["parts"]
    assert reply.finish_reason == "tool_calls"
    assert [(c.call_id, c.arguments) for c in reply.tool_calls] == [
        ("fc_1", {"city": "Paris"}),
        ("fc_2", {"city": "Rome"}),
    ]
    thought, signed = reply.content
    assert thought == ProviderBlock(provider="gemini", kind="thought", data=parts[0])
    assert signed.data == {"call_id": "fc_1", "part": parts[1]}  # the signed call, verbatim
    usage = raw["usageMetadata"]
    assert reply.usage.reasoning_tokens == usage["thoughtsTokenCount"]
    assert reply.usage.output_tokens == usage["candidatesTokenCount"] + usage["thoughtsTokenCount"]


def test_calls_without_ids_get_stable_ids_and_go_back_without_them() -> None:
    calls = Reply(tool_calls=[ToolCallReply("get_weather", {"city": "Oslo"}, id="")])
    with serve({"default": calls.model_dump(by_alias=True)}) as sim:
        raw = generate(sim, FLASH, body(FLASH, [UserMessage(content="x")], tools=(WEATHER,))).json()
    first, again = wire.read_reply(raw), wire.read_reply(raw)
    call = first.tool_calls[0]
    assert call.call_id.startswith("gemini_") and call.call_id == again.tool_calls[0].call_id
    history: list[Message] = [
        UserMessage(content="x"),
        AssistantMessage(content=first.content, tool_calls=first.tool_calls),
        ToolMessage(content="cold", call_id=call.call_id),
    ]
    made = body(FLASH, history)
    assert made["contents"][1]["parts"] == raw["candidates"][0]["content"]["parts"]
    assert made["contents"][2]["parts"] == [
        {"functionResponse": {"name": "get_weather", "response": {"result": "cold"}}}
    ]


def test_code_execution_parts_citations_and_tool_use_tokens() -> None:
    reply = Reply(
        text="Computed.",
        server_tools=[
            ServerToolReply("code_execution", {"code": "print(2)"}, result={"stdout": "2"})
        ],
    )
    with serve({"default": reply.model_dump(by_alias=True)}) as sim:
        raw = generate(sim, FLASH, body(FLASH, [UserMessage(content="x")])).json()
    read = wire.read_reply(raw)
    kinds = [(p.kind if isinstance(p, ProviderBlock) else "text") for p in read.content]
    assert kinds == ["part", "part", "text"]
    assert read.content[0].data == {"executableCode": {"language": "PYTHON", "code": "print(2)"}}
    assert read.usage.input_tokens == (
        raw["usageMetadata"]["promptTokenCount"] + raw["usageMetadata"]["toolUsePromptTokenCount"]
    )


def test_cached_tokens_are_read_as_cached() -> None:
    long = "A long shared document. " * 300
    with serve() as sim:
        made = body(FLASH, [UserMessage(content=long), UserMessage(content="q1")])
        generate(sim, FLASH, made)
        made["contents"][0]["parts"][-1]["text"] = "q2"
        read = wire.read_reply(generate(sim, FLASH, made).json())
    assert read.usage.cached_tokens >= 1024 and read.usage.input_includes_cache
    assert read.usage.uncached_input_tokens == read.usage.input_tokens - read.usage.cached_tokens


@pytest.mark.parametrize(
    ("script", "error", "facts"),
    [
        (
            {"block_reason": "SAFETY"},
            ContentBlockedError,
            {"blocked": "prompt", "reason": "SAFETY"},
        ),
        (
            {"text": "x", "finish": "content_filter"},
            ContentBlockedError,
            {"blocked": "reply", "reason": "SAFETY"},
        ),
        (
            {"text": "x", "finish_reason": "PROHIBITED_CONTENT"},
            ContentBlockedError,
            {"reason": "PROHIBITED_CONTENT"},
        ),
        ({"text": "x", "finish_reason": "RECITATION"}, RecitationError, {"reason": "RECITATION"}),
        (
            {"tool_calls": [{"name": "f", "arguments": "{bad"}]},
            ProviderResponseError,
            {"provider_code": "MALFORMED_FUNCTION_CALL"},
        ),
    ],
)
def test_safety_recitation_and_malformed_calls_are_typed_errors(
    script: dict[str, Any], error: type[Exception], facts: dict[str, Any]
) -> None:
    with serve({"default": script}) as sim:
        made = body(FLASH, [UserMessage(content="x")])
        raw = generate(sim, FLASH, made).json()
        streamed = events(generate(sim, FLASH, made, stream=True))
    with pytest.raises(error) as caught:
        wire.read_reply(raw)
    for key, value in facts.items():
        assert caught.value.details[key] == value  # type: ignore[attr-defined]
    state = wire.StreamState()
    with pytest.raises(error):
        for event in streamed:
            state.feed(event)


@pytest.mark.parametrize(
    ("finish", "expected"),
    [
        ("MAX_TOKENS", "length"),
        ("CONTINUATION", "length"),
        ("OTHER", "error"),
        ("STOP", "stop"),
        (None, "stop"),
    ],
)
def test_finish_reasons_map_to_raygents(finish: str | None, expected: str) -> None:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": "t"}]}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    assert wire.read_reply({"candidates": [candidate]}).finish_reason == expected


@pytest.mark.parametrize(
    "raw",
    [
        [],
        {},
        {"candidates": "no"},
        {"candidates": [[]]},
        {"candidates": [{"content": "no"}]},
        {"candidates": [{"content": {"parts": {"text": "x"}}}]},
        {"candidates": [{"content": {"parts": [{"text": 3}]}}]},
        {"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", "args": [1]}}]}}]},
        {"candidates": [{"content": {"parts": [{"functionCall": {"args": {}}}]}}]},
        {"candidates": [{"content": {"parts": [{"text": "x", "thoughtSignature": 5}]}}]},
        {"candidates": [{"content": {"parts": []}}], "usageMetadata": {"promptTokenCount": "7"}},
    ],
)
def test_malformed_shapes_fail_with_a_named_error(raw: Any) -> None:
    with pytest.raises(ProviderResponseError, match="malformed gemini reply"):
        wire.read_reply(raw)


def test_a_stream_cut_before_its_finish_fails_with_a_named_error() -> None:
    state = wire.StreamState()
    state.feed({"candidates": [{"content": {"role": "model", "parts": [{"text": "partial"}]}}]})
    with pytest.raises(ProviderResponseError, match="before a finish reason"):
        state.reply()


def test_stream_events_become_chunks_and_the_same_reply() -> None:
    script = Reply(
        thinking="Thinking it through, at some length.",
        text="The answer, in several chunks of text.",
    )
    with serve({"default": script.model_dump(by_alias=True)}) as sim:
        made = body(G3, [UserMessage(content="x")], reasoning=ReasoningOptions())
        whole = wire.read_reply(generate(sim, G3, made).json())
        streamed = generate(sim, G3, made, stream=True)
    state = wire.StreamState(tier_header=streamed.headers["x-gemini-service-tier"])
    chunks = [chunk for event in events(streamed) for chunk in state.feed(event)]
    assert state.done
    reply = state.reply()
    assert "".join(c.text for c in chunks if isinstance(c, ReasoningDelta)) == script.thinking
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == script.text
    assert isinstance(chunks[-1], UsageChunk) and chunks[-1].usage == whole.usage
    assert reply.usage == whole.usage and reply.service_tier == "standard"
    assert [p for p in reply.content if isinstance(p, TextPart)] == [
        p for p in whole.content if isinstance(p, TextPart)
    ]
    # Streamed text is joined; the signature that came on an empty part signs it.
    kinds = [p.kind if isinstance(p, ProviderBlock) else "text" for p in reply.content]
    assert kinds == ["thought", "text", "signature"]
    assert reply.content[2].data["thoughtSignature"] == whole.content[-1].data["thoughtSignature"]


def test_streamed_calls_are_whole_tool_call_deltas() -> None:
    with serve({"default": TWO_CALLS.model_dump(by_alias=True)}) as sim:
        streamed = generate(
            sim, G3, body(G3, [UserMessage(content="x")], tools=(WEATHER,)), stream=True
        )
    state = wire.StreamState()
    deltas = [c for e in events(streamed) for c in state.feed(e) if isinstance(c, ToolCallDelta)]
    assert [(d.index, d.call_id, json.loads(d.arguments_delta)) for d in deltas] == [
        (0, "fc_1", {"city": "Paris"}),
        (1, "fc_2", {"city": "Rome"}),
    ]
    assert state.reply().finish_reason == "tool_calls"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("store_as", ["json", "msgpack"])
def test_signatures_round_trip_byte_for_byte_through_the_simulators_check(
    stream: bool, store_as: str
) -> None:
    """A two-step conversation on Gemini 3 (thought summaries, parallel calls, then a
    sequential call): each reply read, its turn stored (JSON or msgpack, as stores keep
    it), sent back; the simulator refuses any signature missing or altered."""
    script = [
        {
            "match": {"last_user": "weather", "after_tool_result": False},
            "reply": TWO_CALLS.model_dump(by_alias=True),
        },
        {
            "match": {"after_tool_result": True},
            "times": 1,
            "reply": {
                "thinking": "Now the third.",
                "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}],
            },
        },
        {
            "match": {"after_tool_result": True},
            "reply": {"thinking": "Done.", "text": "All sunny."},
        },
    ]
    options: dict[str, Any] = {"tools": (WEATHER,), "reasoning": ReasoningOptions()}
    with serve(script) as sim:
        history: list[Message] = [UserMessage(content="weather in Paris and Rome, then Oslo?")]
        sent_signatures: list[str] = []
        for _ in range(3):
            made = body(G3, history, **options)
            response = generate(sim, G3, made, stream=stream)
            assert response.status_code == 200, response.text
            if stream:
                state = wire.StreamState()
                for event in events(response):
                    state.feed(event)
                reply = state.reply()
                raw_parts = [
                    p for e in events(response) for p in e["candidates"][0]["content"]["parts"]
                ]
            else:
                reply = wire.read_reply(response.json())
                raw_parts = response.json()["candidates"][0]["content"]["parts"]
            sent_signatures += [p["thoughtSignature"] for p in raw_parts if "thoughtSignature" in p]
            turn = AssistantMessage(content=reply.content, tool_calls=reply.tool_calls)
            stored = (
                messages_from_json(messages_to_json([turn]))
                if store_as == "json"
                else messages_from_msgpack(messages_to_msgpack([turn]))
            )
            history.append(stored[0])
            history += [ToolMessage(content="sunny", call_id=c.call_id) for c in reply.tool_calls]
            if not reply.tool_calls:
                break
        assert reply.text == "All sunny."
        returned = [
            p["thoughtSignature"]
            for content in sim.requests[-1].body["contents"]
            for p in content["parts"]
            if "thoughtSignature" in p
        ]
        assert returned == sent_signatures[: len(returned)] and len(returned) >= 2
        # And the check is real: the same history with one signature dropped is refused.
        made = body(G3, history[:-1], **options)
        for content in made["contents"]:
            for part in content["parts"]:
                if "functionCall" in part:
                    part.pop("thoughtSignature", None)
        assert generate(sim, G3, made).status_code == 400

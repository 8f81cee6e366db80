"""Every request body our adapters send validates against the official SDK request types.

`request_body()` is the exact JSON each adapter posts. Each body is checked against
`openai.types.chat.completion_create_params.CompletionCreateParams{Non,}Streaming` or
`anthropic.types.message_create_params.MessageCreateParams{Non,}Streaming` by
`_sdk_types.assert_conforms` (pydantic, with lazy iterables drained, *and* a strict walk that
rejects undeclared keys at every depth; see that module). The tests also pin what each option
maps to, and that the API key stays out of reprs and survives pickling.
"""

from __future__ import annotations

import base64
import copy
import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pydantic
import pytest
from _sdk_types import assert_conforms, sdk_errors, sdk_validate
from anthropic.types.message_create_params import (
    MessageCreateParamsNonStreaming,
    MessageCreateParamsStreaming,
)
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming,
    CompletionCreateParamsStreaming,
)

from raygent import (
    AnthropicModel,
    AssistantMessage,
    Capabilities,
    ImagePart,
    Message,
    ModelOptions,
    OpenAIModel,
    ProviderBlock,
    ResponseSchema,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from raygent.models import CacheControl, ReasoningOptions

KEY = "sk-secret-123456"
PNG_B64 = (  # a 1x1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ"
    "AAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="
)
IMAGE_URL = "https://example.com/cat.png"
PARAMS: dict[tuple[str, bool], type] = {
    ("openai", False): CompletionCreateParamsNonStreaming,
    ("openai", True): CompletionCreateParamsStreaming,
    ("anthropic", False): MessageCreateParamsNonStreaming,
    ("anthropic", True): MessageCreateParamsStreaming,
}

AnyModel = OpenAIModel | AnthropicModel
Scenario = tuple[list[Message], ModelOptions | None]

# -- models ------------------------------------------------------------------------------

MODELS: dict[str, Callable[[], AnyModel]] = {
    "openai-gpt-4o": lambda: OpenAIModel("gpt-4o", api_key=KEY),
    "openai-o3-reasoning": lambda: OpenAIModel("o3", api_key=KEY),
    "openai-compatible-local": lambda: OpenAIModel(
        "llama3", api_key=KEY, base_url="http://localhost:8000/v1"
    ),
    "anthropic-sonnet-4-5-thinking": lambda: AnthropicModel("claude-sonnet-4-5", api_key=KEY),
    "anthropic-3-5-haiku": lambda: AnthropicModel("claude-3-5-haiku-latest", api_key=KEY),
}
NOTHING = Capabilities(  # images are refused, not dropped, without vision: see below
    tools=False, structured_output=False, vision=True, reasoning=False, prompt_caching=False
)


def conforms(
    model: AnyModel,
    messages: list[Message],
    options: ModelOptions | None = None,
    *,
    stream: bool = False,
) -> dict[str, Any]:
    """The body `model` would send, after checking it against the SDK's request type."""
    body = model.request_body(messages, options, stream=stream)
    assert_conforms(body, PARAMS[model.provider, stream])
    return body


@pytest.fixture
def png(tmp_path: Path) -> Path:
    path = tmp_path / "pixel.png"
    path.write_bytes(base64.b64decode(PNG_B64))
    return path


# -- scenarios: the same conversations through every adapter ---------------------------------

WEATHER = ToolSpec(
    name="weather",
    description="Weather for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    strict=True,
)
CLOCK = ToolSpec(name="clock")  # no description, default parameters, strict unset
THINKING = {"type": "thinking", "thinking": "Let me check the weather.", "signature": "EqQBCkYI..."}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a..."}


def tool_turns() -> list[Message]:
    """Three calls in one assistant turn, their results (one an error), and a follow-up."""
    return [
        SystemMessage(content="Use the tools."),
        UserMessage(content="Weather in Paris and Oslo, and the time?"),
        AssistantMessage(
            content="Checking.",
            tool_calls=[
                ToolCall.parse("call_1", "weather", '{"city": "Paris"}'),
                ToolCall.parse("call_2", "weather", '{"city": "Oslo"}'),
                ToolCall.parse("call_3", "clock", ""),
            ],
        ),
        ToolMessage(call_id="call_1", name="weather", content="18C, sunny"),
        ToolMessage(call_id="call_2", content="upstream timeout", is_error=True),
        ToolMessage(call_id="call_3", name="clock", content="12:00"),
        AssistantMessage(content="Paris is 18C; Oslo failed; it is noon."),
        UserMessage(content="Thanks."),
    ]


def malformed_turns() -> list[Message]:
    return [
        UserMessage(content="Go."),
        AssistantMessage(
            tool_calls=[
                ToolCall.parse("call_a", "weather", '{"city": "Par'),  # cut off
                ToolCall.parse("call_b", "weather", '["Paris"]'),  # JSON, not an object
            ]
        ),
        ToolMessage(call_id="call_a", content="arguments are not valid JSON", is_error=True),
        ToolMessage(call_id="call_b", content="arguments must be an object", is_error=True),
    ]


def image_turns(png: Path) -> list[Message]:
    return [
        UserMessage(
            content=[
                TextPart(text="What is in these?"),
                ImagePart(url=IMAGE_URL),
                ImagePart(data=PNG_B64, media_type="image/png"),
                ImagePart(path=str(png)),
            ]
        )
    ]


def tool_image_turns(png: Path) -> list[Message]:
    """Tool results holding images (text and an image; an image alone), then plain text."""
    return [
        UserMessage(content="Chart it."),
        AssistantMessage(
            tool_calls=[
                ToolCall.parse("call_1", "chart", ""),
                ToolCall.parse("call_2", "chart", ""),
                ToolCall.parse("call_3", "clock", ""),
            ]
        ),
        ToolMessage(
            call_id="call_1",
            name="chart",
            content=[TextPart(text="the chart:"), ImagePart(data=PNG_B64, media_type="image/png")],
        ),
        ToolMessage(call_id="call_2", content=[ImagePart(path=str(png))]),
        ToolMessage(call_id="call_3", name="clock", content="12:00"),
        UserMessage(content="Thanks."),
    ]


def thinking_turns() -> list[Message]:
    return [
        UserMessage(content="Weather in Paris?"),
        AssistantMessage(
            content=[
                ProviderBlock(provider="anthropic", kind="thinking", data=dict(THINKING)),
                ProviderBlock(provider="anthropic", kind="redacted_thinking", data=dict(REDACTED)),
                ProviderBlock(provider="openai", kind="reasoning", data={"type": "reasoning"}),
                TextPart(text="Checking."),
            ],
            tool_calls=[ToolCall.parse("toolu_1", "weather", '{"city": "Paris"}')],
        ),
        ToolMessage(call_id="toolu_1", content="18C"),
    ]


SCHEMA = ResponseSchema(
    name="answer",
    schema={
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    },
)
EVERYTHING = ModelOptions(
    max_tokens=32000,
    tools=(WEATHER, CLOCK),
    tool_choice="auto",
    response_schema=SCHEMA,
    reasoning=ReasoningOptions(effort="high"),
    cache_control=CacheControl(ttl="1h"),
    provider_options={
        "openai": {"seed": 7, "parallel_tool_calls": False, "user": "u-1"},
        "anthropic": {"stop_sequences": ["END"], "metadata": {"user_id": "u-1"}},
    },
)

SCENARIOS: dict[str, Callable[[Path], Scenario]] = {
    "plain-text": lambda _: ([UserMessage(content="Hello")], None),
    "multi-turn-with-system": lambda _: (
        [
            SystemMessage(content="Be brief."),
            SystemMessage(content=[TextPart(text="Answer in English.")]),
            UserMessage(content="Hi"),
            AssistantMessage(content="Hello!"),
            UserMessage(content=[TextPart(text="Two "), TextPart(text="parts")]),
        ],
        ModelOptions(max_tokens=256),
    ),
    "images": lambda png: (image_turns(png), None),
    "tool-calls-and-results": lambda _: (tool_turns(), ModelOptions(tools=(WEATHER, CLOCK))),
    "tool-result-images": lambda png: (tool_image_turns(png), ModelOptions(tools=(CLOCK,))),
    "malformed-tool-arguments": lambda _: (malformed_turns(), ModelOptions(tools=(WEATHER,))),
    "tool-choice-required": lambda _: (
        [UserMessage(content="Weather?")],
        ModelOptions(tools=(WEATHER,), tool_choice="required"),
    ),
    "response-schema": lambda _: (
        [UserMessage(content="Answer.")],
        ModelOptions(response_schema=SCHEMA),
    ),
    "reasoning-effort": lambda _: (
        [UserMessage(content="Think.")],
        ModelOptions(max_tokens=32000, reasoning=ReasoningOptions(effort="high")),
    ),
    "reasoning-budget": lambda _: (
        [UserMessage(content="Think.")],
        ModelOptions(reasoning=ReasoningOptions(max_tokens=2048)),
    ),
    "thinking-blocks-replayed": lambda _: (
        thinking_turns(),
        ModelOptions(tools=(WEATHER,), reasoning=ReasoningOptions(effort="low")),
    ),
    "cache-breakpoints": lambda _: (
        tool_turns(),
        ModelOptions(
            tools=(WEATHER, CLOCK),
            cache_control=CacheControl(breakpoints=("tools", "system", "last_message", 0, 1, 2)),
        ),
    ),
    "everything": lambda png: (image_turns(png) + tool_turns()[2:], EVERYTHING),
}


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("model_id", list(MODELS))
def test_every_body_validates_against_the_sdk(
    model_id: str, scenario: str, stream: bool, png: Path
) -> None:
    messages, options = SCENARIOS[scenario](png)
    body = conforms(MODELS[model_id](), messages, options, stream=stream)
    assert ("stream" in body) is stream


@pytest.mark.parametrize("model_id", list(MODELS))
def test_temperature_validates_against_the_sdk(model_id: str) -> None:
    """A plain sampling temperature, no reasoning: the body must still be one the SDK accepts."""
    conforms(MODELS[model_id](), [UserMessage(content="Hi")], ModelOptions(temperature=0.2))


# -- the checker can fail ----------------------------------------------------------------------


def _valid_anthropic_body() -> dict[str, Any]:
    model = AnthropicModel("claude-3-5-haiku-latest", api_key=KEY)
    return conforms(model, tool_turns(), ModelOptions(tools=(WEATHER,)))


def test_checker_rejects_an_unknown_key_at_any_depth() -> None:
    top = _valid_anthropic_body()
    top["temprature"] = 0.5
    nested = _valid_anthropic_body()
    nested["messages"][1]["content"][1]["arguments"] = {"city": "Paris"}  # a tool_use block
    for body in (top, nested):
        # pydantic on its own ignores keys a TypedDict does not declare...
        sdk_validate(body, MessageCreateParamsNonStreaming)
        # ...the strict walk does not.
        assert sdk_errors(body, MessageCreateParamsNonStreaming)
        with pytest.raises(AssertionError, match="not declared"):
            assert_conforms(body, MessageCreateParamsNonStreaming)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("max_tokens",), "4096"),  # a numeric string is not an int
        (("messages", 0, "role"), "robot"),
        (("messages", 2, "content", 1, "is_error"), "yes"),  # deep inside lazy iterables
        (("tools", 0, "input_schema"), ["not", "an", "object"]),
    ],
)
def test_checker_rejects_a_wrong_type(path: tuple[str | int, ...], value: Any) -> None:
    body = _valid_anthropic_body()
    target: Any = body
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    assert sdk_errors(body, MessageCreateParamsNonStreaming)
    with pytest.raises(pydantic.ValidationError):
        sdk_validate(body, MessageCreateParamsNonStreaming)
    with pytest.raises(AssertionError):
        assert_conforms(body, MessageCreateParamsNonStreaming)


def test_checker_rejects_openai_mistakes() -> None:
    body = conforms(OpenAIModel("gpt-4o", api_key=KEY), tool_turns())
    assert not sdk_errors(body, CompletionCreateParamsNonStreaming)
    wrong = copy.deepcopy(body)
    wrong["messages"][2]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}
    assert sdk_errors(wrong, CompletionCreateParamsNonStreaming)
    extra = copy.deepcopy(body)
    extra["messages"][3]["is_error"] = True  # a tool message has no such field
    assert sdk_errors(extra, CompletionCreateParamsNonStreaming)
    missing = {k: v for k, v in body.items() if k != "model"}
    assert sdk_errors(missing, CompletionCreateParamsNonStreaming) == [
        "$.model: required by CompletionCreateParamsNonStreaming, missing"
    ]
    # A non-streaming body is not a streaming one, and the other way round.
    assert sdk_errors(body, CompletionCreateParamsStreaming)
    assert sdk_errors({**body, "stream": True}, CompletionCreateParamsNonStreaming)


# -- OpenAI: what each option becomes ----------------------------------------------------------


def test_openai_images(png: Path) -> None:
    body = conforms(OpenAIModel("gpt-4o", api_key=KEY), image_turns(png))
    parts = body["messages"][0]["content"]
    assert parts[0] == {"type": "text", "text": "What is in these?"}
    assert [p["image_url"]["url"] for p in parts[1:]] == [
        IMAGE_URL,
        f"data:image/png;base64,{PNG_B64}",
        f"data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()}",
    ]


def test_openai_tool_calls_and_results() -> None:
    body = conforms(
        OpenAIModel("gpt-4o", api_key=KEY), tool_turns(), ModelOptions(tools=(WEATHER,))
    )
    system, _user, assistant, *results, _reply, _thanks = body["messages"]
    assert system == {"role": "system", "content": "Use the tools."}
    assert assistant["content"] == "Checking."
    assert [
        (c["id"], c["function"]["name"], c["function"]["arguments"])
        for c in assistant["tool_calls"]
    ] == [
        ("call_1", "weather", '{"city": "Paris"}'),
        ("call_2", "weather", '{"city": "Oslo"}'),
        ("call_3", "clock", "{}"),
    ]
    assert results == [
        {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "upstream timeout"},
        {"role": "tool", "tool_call_id": "call_3", "content": "12:00"},
    ]
    assert body["tools"][0] == {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Weather for a city.",
            "parameters": WEATHER.parameters,
            "strict": True,
        },
    }


def test_openai_tool_images_follow_the_tool_messages_in_a_user_message(png: Path) -> None:
    body = conforms(OpenAIModel("gpt-4o", api_key=KEY), tool_image_turns(png))
    _user, _assistant, *results, images, thanks = body["messages"]
    assert results == [
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": "the chart:\n[1 image: in the next user message]",
        },
        {
            "role": "tool",
            "tool_call_id": "call_2",
            "content": "[1 image: in the next user message]",
        },
        {"role": "tool", "tool_call_id": "call_3", "content": "12:00"},
    ]
    pixel = base64.b64encode(png.read_bytes()).decode()
    assert images == {
        "role": "user",
        "content": [
            {"type": "text", "text": "The image of tool call call_1 (chart):"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
            {"type": "text", "text": "The image of tool call call_2:"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{pixel}"}},
        ],
    }
    assert thanks == {"role": "user", "content": "Thanks."}
    # Images at the end of the conversation still come after every tool message.
    body = conforms(OpenAIModel("gpt-4o", api_key=KEY), tool_image_turns(png)[:-2])
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "tool", "user"]


def test_openai_replays_malformed_arguments_verbatim() -> None:
    body = conforms(OpenAIModel("gpt-4o", api_key=KEY), malformed_turns())
    calls = body["messages"][1]["tool_calls"]
    assert [c["function"]["arguments"] for c in calls] == ['{"city": "Par', '["Paris"]']
    assert body["messages"][1]["content"] is None


@pytest.mark.parametrize("choice", ["auto", "required", "none", None])
def test_openai_tool_choice(choice: Any) -> None:
    options = ModelOptions(tools=(WEATHER,), tool_choice=choice)
    body = conforms(OpenAIModel("gpt-4o", api_key=KEY), [UserMessage(content="Hi")], options)
    assert body.get("tool_choice") == choice


def test_openai_response_schema() -> None:
    options = ModelOptions(response_schema=SCHEMA)
    body = conforms(OpenAIModel("gpt-4o", api_key=KEY), [UserMessage(content="Hi")], options)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": SCHEMA.json_schema, "strict": True},
    }


def test_openai_reasoning_effort_only_with_the_capability() -> None:
    options = ModelOptions(reasoning=ReasoningOptions(effort="minimal"))
    on = conforms(OpenAIModel("o3", api_key=KEY), [UserMessage(content="Hi")], options)
    off = conforms(OpenAIModel("gpt-4o", api_key=KEY), [UserMessage(content="Hi")], options)
    budget_only = ModelOptions(reasoning=ReasoningOptions(max_tokens=2048))
    no_effort = conforms(OpenAIModel("o3", api_key=KEY), [UserMessage(content="Hi")], budget_only)
    assert on["reasoning_effort"] == "minimal"
    assert "reasoning_effort" not in off
    assert "reasoning_effort" not in no_effort


def test_openai_max_tokens_field_follows_the_server() -> None:
    options = ModelOptions(max_tokens=100)
    official = conforms(OpenAIModel("gpt-4o", api_key=KEY), [UserMessage(content="Hi")], options)
    local = OpenAIModel("llama3", api_key=KEY, base_url="http://localhost:8000/v1")
    compatible = conforms(local, [UserMessage(content="Hi")], options)
    assert official["max_completion_tokens"] == 100 and "max_tokens" not in official
    assert compatible["max_tokens"] == 100 and "max_completion_tokens" not in compatible


def test_openai_stream_body() -> None:
    body = conforms(OpenAIModel("gpt-4o", api_key=KEY), [UserMessage(content="Hi")], stream=True)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_openai_drops_anthropic_blocks_and_cache_markers() -> None:
    options = ModelOptions(cache_control=CacheControl(ttl="1h"))
    body = conforms(OpenAIModel("gpt-4o", api_key=KEY), thinking_turns(), options)
    assert body["messages"][1]["content"] == "Checking."
    assert "cache_control" not in json.dumps(body)
    assert THINKING["signature"] not in json.dumps(body)


# -- Anthropic: what each option becomes -------------------------------------------------------


def test_anthropic_system_turns_and_tool_results() -> None:
    model = AnthropicModel("claude-3-5-haiku-latest", api_key=KEY)
    body = conforms(model, tool_turns(), ModelOptions(tools=(WEATHER, CLOCK)))
    assert body["system"] == [{"type": "text", "text": "Use the tools."}]
    assert [t["role"] for t in body["messages"]] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assistant, results = body["messages"][1]["content"], body["messages"][2]["content"]
    assert assistant == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_2", "name": "weather", "input": {"city": "Oslo"}},
        {"type": "tool_use", "id": "call_3", "name": "clock", "input": {}},
    ]
    assert results == [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "18C, sunny"},
        {
            "type": "tool_result",
            "tool_use_id": "call_2",
            "content": "upstream timeout",
            "is_error": True,
        },
        {"type": "tool_result", "tool_use_id": "call_3", "content": "12:00"},
    ]
    assert body["messages"][4]["content"] == [{"type": "text", "text": "Thanks."}]
    assert body["tools"][1] == {
        "name": "clock",
        "input_schema": {"type": "object"},
    }


def test_anthropic_images(png: Path) -> None:
    body = conforms(AnthropicModel("claude-sonnet-4-5", api_key=KEY), image_turns(png))
    sources = [b["source"] for b in body["messages"][0]["content"][1:]]
    assert sources == [
        {"type": "url", "url": IMAGE_URL},
        {"type": "base64", "media_type": "image/png", "data": PNG_B64},
        {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(png.read_bytes()).decode(),
        },
    ]


def test_anthropic_tool_results_hold_image_blocks(png: Path) -> None:
    body = conforms(AnthropicModel("claude-sonnet-4-5", api_key=KEY), tool_image_turns(png))
    assert [t["role"] for t in body["messages"]] == ["user", "assistant", "user"]
    first, second, third, thanks = body["messages"][2]["content"]
    pixel = base64.b64encode(png.read_bytes()).decode()
    assert first["content"] == [
        {"type": "text", "text": "the chart:"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
    ]
    assert second["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": pixel}}
    ]
    assert third["content"] == "12:00" and thanks == {"type": "text", "text": "Thanks."}


def test_anthropic_malformed_arguments_become_an_empty_input() -> None:
    model = AnthropicModel("claude-3-5-haiku-latest", api_key=KEY)
    body = conforms(model, malformed_turns(), ModelOptions(tools=(WEATHER,)))
    uses = body["messages"][1]["content"]
    assert [(u["id"], u["input"]) for u in uses] == [("call_a", {}), ("call_b", {})]
    assert all(r["is_error"] for r in body["messages"][2]["content"])


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", {"type": "auto"}),
        ("required", {"type": "any"}),
        ("none", {"type": "none"}),
        (None, None),
    ],
)
def test_anthropic_tool_choice(choice: Any, wire: Any) -> None:
    options = ModelOptions(tools=(WEATHER,), tool_choice=choice)
    model = AnthropicModel("claude-sonnet-4-5", api_key=KEY)
    body = conforms(model, [UserMessage(content="Hi")], options)
    assert body.get("tool_choice") == wire


def test_anthropic_does_not_forward_a_response_schema() -> None:
    model = AnthropicModel("claude-sonnet-4-5", api_key=KEY)
    assert model.capabilities.structured_output is False
    body = conforms(model, [UserMessage(content="Hi")], ModelOptions(response_schema=SCHEMA))
    assert set(body) == {"model", "max_tokens", "messages"}


@pytest.mark.parametrize(
    ("reasoning", "max_tokens", "budget"),
    [
        (ReasoningOptions(max_tokens=2048), None, 2048),
        (ReasoningOptions(effort="high"), 32000, 24576),
        (ReasoningOptions(effort="high"), None, 4095),  # kept below max_tokens (4096)
        (ReasoningOptions(max_tokens=10), None, 1024),  # the API's minimum
    ],
)
def test_anthropic_thinking_budget_and_no_temperature(
    reasoning: ReasoningOptions, max_tokens: int | None, budget: int
) -> None:
    options = ModelOptions(temperature=0.3, max_tokens=max_tokens, reasoning=reasoning)
    model = AnthropicModel("claude-sonnet-4-5", api_key=KEY)
    body = conforms(model, [UserMessage(content="Think.")], options)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert body["thinking"]["budget_tokens"] < body["max_tokens"]
    assert "temperature" not in body


def test_anthropic_no_thinking_without_the_capability_or_room() -> None:
    options = ModelOptions(reasoning=ReasoningOptions(effort="high"))
    haiku = AnthropicModel("claude-3-5-haiku-latest", api_key=KEY)
    assert "thinking" not in conforms(haiku, [UserMessage(content="Hi")], options)
    tight = ModelOptions(max_tokens=1024, reasoning=ReasoningOptions(effort="high"))
    sonnet = AnthropicModel("claude-sonnet-4-5", api_key=KEY)
    assert "thinking" not in conforms(sonnet, [UserMessage(content="Hi")], tight)


def test_anthropic_replays_thinking_blocks_verbatim() -> None:
    messages = thinking_turns()
    options = ModelOptions(tools=(WEATHER,), reasoning=ReasoningOptions(effort="low"))
    body = conforms(AnthropicModel("claude-sonnet-4-5", api_key=KEY), messages, options)
    blocks = body["messages"][1]["content"]
    assert blocks[0] == THINKING  # the original `data`, signature and all
    assert blocks[1] == REDACTED
    assert [b["type"] for b in blocks[2:]] == ["text", "tool_use"]  # the OpenAI block dropped


def _cache_marked(body: dict[str, Any]) -> list[str]:
    """Where cache_control landed, as readable paths."""
    out = [f"tools[{i}]" for i, t in enumerate(body.get("tools", ())) if "cache_control" in t]
    out += [f"system[{i}]" for i, b in enumerate(body.get("system", ())) if "cache_control" in b]
    for i, turn in enumerate(body["messages"]):
        out += [
            f"messages[{i}][{j}]" for j, b in enumerate(turn["content"]) if "cache_control" in b
        ]
    return out


@pytest.mark.parametrize(
    ("ttl", "marker"), [("5m", {"type": "ephemeral"}), ("1h", {"type": "ephemeral", "ttl": "1h"})]
)
def test_anthropic_cache_breakpoints(ttl: Any, marker: dict[str, str]) -> None:
    options = ModelOptions(tools=(WEATHER, CLOCK), cache_control=CacheControl(ttl=ttl))
    body = conforms(AnthropicModel("claude-sonnet-4-5", api_key=KEY), tool_turns(), options)
    assert _cache_marked(body) == ["tools[1]", "system[0]", "messages[4][0]"]
    assert body["tools"][1]["cache_control"] == marker
    assert body["system"][0]["cache_control"] == marker
    assert body["messages"][4]["content"][0]["cache_control"] == marker


def test_anthropic_at_most_four_cache_breakpoints() -> None:
    breakpoints = ("tools", "system", "last_message", 0, 1, 2, 3)
    options = ModelOptions(tools=(WEATHER,), cache_control=CacheControl(breakpoints=breakpoints))
    body = conforms(AnthropicModel("claude-sonnet-4-5", api_key=KEY), tool_turns(), options)
    assert _cache_marked(body) == ["tools[0]", "system[0]", "messages[0][0]", "messages[4][0]"]


@pytest.mark.parametrize("block", [THINKING, REDACTED], ids=["thinking", "redacted_thinking"])
@pytest.mark.parametrize("breakpoints", [("last_message",), (1,)], ids=["last_message", "index"])
def test_anthropic_cache_breakpoint_on_a_thinking_only_turn(
    block: dict[str, Any], breakpoints: Any
) -> None:
    """An assistant turn that is only thinking (e.g. cut off by max_tokens): the API does
    not let thinking blocks carry cache_control, so the marker must not land there."""
    messages: list[Message] = [
        UserMessage(content="Think hard."),
        AssistantMessage(
            content=[ProviderBlock(provider="anthropic", kind=block["type"], data=dict(block))]
        ),
    ]
    options = ModelOptions(cache_control=CacheControl(breakpoints=breakpoints))
    conforms(AnthropicModel("claude-sonnet-4-5", api_key=KEY), messages, options)


def test_anthropic_cache_marking_leaves_messages_untouched() -> None:
    messages = thinking_turns()
    before = [m.model_dump() for m in messages]
    options = ModelOptions(cache_control=CacheControl(breakpoints=("last_message", 1)))
    body = conforms(AnthropicModel("claude-sonnet-4-5", api_key=KEY), messages, options)
    assert _cache_marked(body) == ["messages[1][3]", "messages[2][0]"]
    assert [m.model_dump() for m in messages] == before


def test_anthropic_stream_body() -> None:
    model = AnthropicModel("claude-sonnet-4-5", api_key=KEY)
    body = conforms(model, [UserMessage(content="Hi")], stream=True)
    assert body["stream"] is True
    assert "stream_options" not in body


# -- both adapters -----------------------------------------------------------------------------


@pytest.mark.parametrize("model_id", ["openai-gpt-4o", "anthropic-sonnet-4-5-thinking"])
def test_provider_options_reach_only_their_own_adapter(model_id: str) -> None:
    model = MODELS[model_id]()
    body = conforms(model, [UserMessage(content="Hi")], EVERYTHING)
    ours = EVERYTHING.provider_options[model.provider]
    theirs = next(v for k, v in EVERYTHING.provider_options.items() if k != model.provider)
    assert {k: body[k] for k in ours} == ours
    assert not set(theirs) & set(body)


@pytest.mark.parametrize("model_id", ["openai-o3-reasoning", "anthropic-sonnet-4-5-thinking"])
def test_options_without_the_capability_are_not_sent(model_id: str, png: Path) -> None:
    model = MODELS[model_id]()
    full = conforms(model, image_turns(png), EVERYTHING)
    model.capabilities = NOTHING
    bare = conforms(model, image_turns(png), EVERYTHING)
    gated = {"tools", "tool_choice", "response_format", "reasoning_effort", "thinking"}
    assert gated & set(full)  # the options do reach a capable model
    assert not gated & set(bare)
    assert "cache_control" not in json.dumps(bare)
    tools_only = model.__class__(model.name, api_key=KEY, capabilities=Capabilities(tools=False))
    assert not {"tools", "tool_choice"} & set(conforms(tools_only, image_turns(png), EVERYTHING))


@pytest.mark.parametrize("model_id", list(MODELS))
def test_images_are_refused_before_any_request_without_vision(model_id: str, png: Path) -> None:
    from raygent.errors import InvalidRequestError

    model = MODELS[model_id]()
    model.capabilities = Capabilities(vision=False)
    with pytest.raises(InvalidRequestError, match="vision"):
        model.request_body(image_turns(png), None, stream=False)
    assert model.request_body([UserMessage(content="no image")], None, stream=False)


# -- the key: never in a repr, kept across pickling ------------------------------------------------


@pytest.mark.parametrize("model_id", list(MODELS))
def test_the_key_never_shows(model_id: str, png: Path) -> None:
    model = MODELS[model_id]()
    messages, options = SCENARIOS["everything"](png)
    body = model.request_body(messages, options, stream=False)
    for text in (repr(model), str(model), repr(body), json.dumps(body), repr(model.endpoint)):
        assert KEY not in text


@pytest.mark.parametrize("cls", [OpenAIModel, AnthropicModel])
def test_the_key_from_the_environment_never_shows(
    cls: type[AnyModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cls.env_key, KEY)
    model = cls("some-model")
    assert model.key_fingerprint == cls("some-model", api_key=KEY).key_fingerprint
    assert KEY not in repr(model)


@pytest.mark.parametrize("model_id", list(MODELS))
def test_pickle_round_trip(model_id: str, png: Path) -> None:
    model = MODELS[model_id]()
    messages, options = SCENARIOS["everything"](png)
    clone = pickle.loads(pickle.dumps(model))
    assert type(clone) is type(model)
    assert repr(clone) == repr(model)
    assert clone.endpoint == model.endpoint  # same key fingerprint: the key travelled
    for stream in (False, True):
        assert clone.request_body(messages, options, stream=stream) == model.request_body(
            messages, options, stream=stream
        )


@pytest.mark.parametrize("cls", [OpenAIModel, AnthropicModel])
async def test_pickle_drops_an_injected_client(cls: type[AnyModel]) -> None:
    async with httpx.AsyncClient() as client:
        model = cls("some-model", api_key=KEY, http_client=client)
        clone = pickle.loads(pickle.dumps(model))
    assert clone.endpoint == model.endpoint
    assert clone.request_body(
        [UserMessage(content="Hi")], None, stream=False
    ) == model.request_body([UserMessage(content="Hi")], None, stream=False)

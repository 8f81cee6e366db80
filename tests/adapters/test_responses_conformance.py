"""Every request body OpenAIResponsesModel sends validates against the official SDK's
`ResponseCreateParams{Non,}Streaming`, by the same two gates as the other wires
(`_sdk_types.assert_conforms`: pydantic strict with lazy iterables drained, and a strict
walk that rejects undeclared keys at every depth). The scenarios are those of
test_request_conformance.py, plus a replayed reasoning item as the simulator sends it."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import pytest
from _sdk_types import assert_conforms, sdk_errors
from openai.types.responses.response_create_params import (
    ResponseCreateParamsNonStreaming,
    ResponseCreateParamsStreaming,
)
from test_request_conformance import KEY, PNG_B64, WEATHER, Scenario, tool_image_turns, tool_turns
from test_request_conformance import SCENARIOS as SHARED

from raygent import (
    AssistantMessage,
    Message,
    ModelOptions,
    OpenAIResponsesModel,
    ProviderBlock,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from raygent.models import ReasoningOptions

PARAMS = {False: ResponseCreateParamsNonStreaming, True: ResponseCreateParamsStreaming}
MODELS = {
    "gpt-5": lambda: OpenAIResponsesModel("gpt-5", api_key=KEY),
    "gpt-4o": lambda: OpenAIResponsesModel("gpt-4o", api_key=KEY),
    "gpt-5-store": lambda: OpenAIResponsesModel("gpt-5", api_key=KEY, store=True),
}
REASONING_ITEM = {  # as the simulator (and the API) send it back
    "id": "rs_1",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "Check the weather."}],
    "encrypted_content": "gAAAAsim...",
}


def conforms(
    model: OpenAIResponsesModel,
    messages: list[Message],
    options: ModelOptions | None = None,
    *,
    stream: bool = False,
) -> dict[str, Any]:
    body = model.request_body(messages, options, stream=stream)
    assert_conforms(body, PARAMS[stream])
    return body


def reasoning_turns() -> list[Message]:
    return [
        UserMessage(content="Weather in Paris?"),
        AssistantMessage(
            content=[
                ProviderBlock(provider="openai", kind="reasoning", data=dict(REASONING_ITEM)),
                ProviderBlock(provider="anthropic", kind="thinking", data={"type": "thinking"}),
            ],
            tool_calls=[ToolCall.parse("call_1", "weather", '{"city": "Paris"}')],
        ),
        ToolMessage(call_id="call_1", content="18C"),
    ]


@pytest.fixture
def png(tmp_path: Path) -> Path:
    path = tmp_path / "pixel.png"
    path.write_bytes(base64.b64decode(PNG_B64))
    return path


def _replayed(_: Path) -> Scenario:
    return reasoning_turns(), ModelOptions(
        tools=(WEATHER,), reasoning=ReasoningOptions(effort="low")
    )


# The shared replay scenario's "openai" block is a bare stand-in for the other adapters
# to drop; here our own blocks are replayed verbatim, so it is a real reasoning item.
SCENARIOS = {**SHARED, "thinking-blocks-replayed": _replayed}


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("model_id", list(MODELS))
def test_every_body_validates_against_the_sdk(
    model_id: str, scenario: str, stream: bool, png: Path
) -> None:
    messages, options = SCENARIOS[scenario](png)
    body = conforms(MODELS[model_id](), messages, options, stream=stream)
    assert ("stream" in body) is stream


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
def test_a_replayed_reasoning_item_validates(stream: bool) -> None:
    messages, options = _replayed(Path())
    body = conforms(OpenAIResponsesModel("gpt-5", api_key=KEY), messages, options, stream=stream)
    assert body["input"][1] == REASONING_ITEM  # verbatim; the Anthropic block is dropped
    assert [i.get("type") for i in body["input"]] == [
        None,
        "reasoning",
        "function_call",
        "function_call_output",
    ]


def test_a_function_call_output_holds_image_items(png: Path) -> None:
    model = OpenAIResponsesModel("gpt-5", api_key=KEY)
    body = conforms(model, tool_image_turns(png))
    outputs = [i["output"] for i in body["input"] if i.get("type") == "function_call_output"]
    pixel = base64.b64encode(png.read_bytes()).decode()
    image = {"type": "input_image", "detail": "auto"}
    assert outputs == [
        [
            {"type": "input_text", "text": "the chart:"},
            {**image, "image_url": f"data:image/png;base64,{PNG_B64}"},
        ],
        [{**image, "image_url": f"data:image/png;base64,{pixel}"}],
        "12:00",
    ]


def test_the_checker_rejects_responses_mistakes() -> None:
    model = OpenAIResponsesModel("gpt-5", api_key=KEY)
    body = conforms(model, tool_turns(), ModelOptions(tools=(WEATHER,)))
    chat_tool = copy.deepcopy(body)
    chat_tool["tools"][0] = {"type": "function", "function": {"name": "weather"}}
    wrong_output = copy.deepcopy(body)
    next(i for i in wrong_output["input"] if i.get("type") == "function_call_output")["id"] = 7
    extra = {**body, "response_format": {"type": "json_object"}}  # a Chat Completions field
    for wrong in (chat_tool, wrong_output, extra):
        assert sdk_errors(wrong, ResponseCreateParamsNonStreaming)
    assert sdk_errors(body, ResponseCreateParamsStreaming)  # no "stream": not a streaming body

"""Every reply shape the simulator scripts, read on each wire, streamed and not: server
tools with their input as input_json_delta and their results, citations, pause_turn
(resumed by an agent, streamed too), Chat content as a list of parts with thinking,
refusals, cut-off replies, in-stream errors, 429 / 529 / 5xx."""

from __future__ import annotations

from typing import Any

import pytest
from adapter_support import make_model

import raygent
from raygent import ModelOptions, ToolMessage, ToolSpec, UserMessage
from raygent.errors import ProviderError, RateLimitError, ServerError
from raygent.models import Done, ModelResponse, ReasoningDelta, TextDelta, ToolCallDelta
from raygent.sim import Fault, Match, Reply, Rule, ServerToolReply, ToolCallReply, serve

HELLO = [UserMessage(content="hello")]
CITATION = {
    "type": "web_search_result_location",
    "cited_text": "Sunny all week.",
    "url": "https://example.com/",
    "title": "Example Domain",
    "encrypted_index": "ZW5j",
}
SEARCH = ServerToolReply("web_search", {"query": "weather in Paris"})
WEATHER = ToolSpec(name="get_weather", parameters={"type": "object"})


async def both(model: Any, options: ModelOptions | None = None) -> tuple[ModelResponse, list[Any]]:
    """The reply not streamed, and the chunks of the same reply streamed; the streamed
    reply equals the other (ids aside: the response's, and its items' on Responses)."""
    complete = await model.complete(HELLO, options)
    chunks = [c async for c in model.stream(HELLO, options)]
    done = chunks[-1]
    assert isinstance(done, Done)
    assert _without_ids(done.response) == _without_ids(complete)
    return complete, chunks


def _without_ids(response: ModelResponse) -> dict[str, Any]:
    dumped = response.model_dump(exclude={"response_id"})
    for part in dumped["content"]:
        if part["type"] == "provider" and "id" in part["data"]:
            part["data"] = {**part["data"], "id": None}
    return dumped


@pytest.mark.parametrize("tool", ["web_search", "mcp"])
async def test_anthropic_server_tools_stream_and_replay(tool: str) -> None:
    server_tool = (
        SEARCH
        if tool == "web_search"
        else ServerToolReply("lookup", {"id": 7, "deep": {"a": [1, 2]}}, server_name="docs")
    )
    reply = Reply(
        server_tools=[server_tool],
        text="It is sunny in Paris.",
        citations=[CITATION] if tool == "web_search" else [],
        tool_calls=[ToolCallReply("get_weather", {"city": "Paris"})],
    )
    async with serve([Rule(reply=reply)]) as sim:
        model = make_model("anthropic", sim)
        options = ModelOptions(tools=(WEATHER,))
        response, chunks = await both(model, options)
        # The next turn sends the server tool's block back with its input (and the
        # client tool's result: the API refuses a tool_use left unanswered).
        call = response.tool_calls[0]
        answer = ToolMessage(call_id=call.call_id, name=call.name, content="sunny")
        await model.complete([*HELLO, response.message, answer, UserMessage(content="more")])
        replayed = sim.requests[-1].body["messages"][1]["content"]
    use = response.blocks[0]
    assert use.kind == ("server_tool_use" if tool == "web_search" else "mcp_tool_use")
    assert use.data["input"] == server_tool.input
    assert response.blocks[1].kind.endswith("_tool_result")
    assert response.text == "It is sunny in Paris."
    assert [c.name for c in response.tool_calls] == ["get_weather"]
    assert response.finish_reason == "tool_calls"
    calls = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert calls and {c.name for c in calls} == {"get_weather"}  # only the client's tool
    assert replayed[0] == use.data and replayed[0]["input"] == server_tool.input


async def test_anthropic_pause_turn_with_a_server_tool_is_resumed_streamed() -> None:
    script = [
        Rule(
            match=Match(last_user="research"),
            reply=[
                Reply(server_tools=[SEARCH], text="Searching... ", finish="pause_turn"),
                Reply(text="Found it.", citations=[CITATION]),
            ],
        )
    ]
    async with serve(script) as sim:
        bot = raygent.agent(model=make_model("anthropic", sim))
        executed = await bot.execute("research this")
        stream = bot.stream("research this")
        [event async for event in stream]
        streamed = await stream.result
        resumed = sim.requests[3].body["messages"]
    for result in (executed, streamed):
        assert result.ok, result.error
        assert result.text == "Searching... Found it."
        assert [t.finish_reason for t in result.report.trips] == ["pause_turn", "stop"]
    # The paused turn went back as is: the server tool's block with its input.
    assert resumed[-1]["role"] == "assistant"
    assert resumed[-1]["content"][0]["type"] == "server_tool_use"
    assert resumed[-1]["content"][0]["input"] == SEARCH.input


async def test_chat_content_as_a_list_with_thinking() -> None:
    reply = Reply(thinking="Let me think.", text="Hello there!", list_content=True)
    async with serve([Rule(reply=reply)]) as sim:
        response, chunks = await both(make_model("openai", sim))
    assert response.text == "Hello there!"
    assert [(b.kind, b.data) for b in response.blocks] == [
        ("thinking", {"type": "thinking", "thinking": "Let me think."})
    ]
    reasoning = "".join(c.text for c in chunks if isinstance(c, ReasoningDelta))
    text = "".join(c.text for c in chunks if isinstance(c, TextDelta))
    assert (reasoning, text) == ("Let me think.", "Hello there!")


FINISHES = {
    "refusal": (Reply(refusal="I can't help with that."), "refusal"),
    "pause_turn": (Reply(text="partial", finish="pause_turn"), None),
    "length-finish": (Reply(text="cut", finish="length"), "length"),
}


@pytest.mark.parametrize("case", sorted(FINISHES))
async def test_finish_reasons_on_each_wire(provider: str, case: str) -> None:
    reply, expected = FINISHES[case]
    async with serve([Rule(reply=reply)]) as sim:
        response, _ = await both(make_model(provider, sim))
    if expected is None:  # pause_turn: Anthropic's; the OpenAI wires say stop
        expected = "pause_turn" if provider == "anthropic" else "stop"
    if provider == "gemini" and case == "refusal":  # Gemini has none: the text says it
        expected = "stop"
    assert response.finish_reason == expected
    if case == "refusal" and provider != "gemini":
        assert response.refusal


async def test_max_tokens_cut_is_length_on_each_wire(provider: str) -> None:
    async with serve([Rule(reply=Reply(text="word " * 50))]) as sim:
        response, _ = await both(make_model(provider, sim), ModelOptions(max_tokens=5))
    assert response.finish_reason == "length" and response.text


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (Fault(kind="stream_error", after_chunks=3), ServerError),
        (Fault(kind="status", status=429, retry_after=3, headers={"x-sim": "1"}), RateLimitError),
        (Fault(kind="status", status=529), ServerError),
        (Fault(kind="status", status=502, body="<html>bad gateway</html>"), ServerError),
    ],
    ids=["stream-error", "429", "529", "502-html"],
)
async def test_error_shapes_on_each_wire(
    provider: str, fault: Fault, error: type[ProviderError]
) -> None:
    async with serve([Rule(reply=Reply(text="never " * 20, fault=fault))]) as sim:
        model = make_model(provider, sim)
        with pytest.raises(error) as unstreamed:
            await model.complete(HELLO)
        seen: list[Any] = []
        with pytest.raises(error) as streamed:
            async for chunk in model.stream(HELLO):
                seen.append(chunk)
    assert not any(isinstance(c, Done) for c in seen)
    for info in (unstreamed, streamed):
        assert info.value.retryable
        if isinstance(info.value, RateLimitError):  # Bedrock sends no Retry-After
            assert info.value.retry_after == (None if provider == "bedrock" else 3.0)


BUILT_IN = {
    "web_search": (SEARCH, "web_search_call"),
    "mcp": (ServerToolReply("lookup", {"id": 7}, server_name="docs"), "mcp_call"),
    "code": (ServerToolReply("code_execution", {"code": "print(1)"}), "code_interpreter_call"),
}


@pytest.mark.parametrize("tool", sorted(BUILT_IN))
async def test_responses_built_in_tools_stream_and_replay(tool: str) -> None:
    """A Responses built-in tool call is a provider block kept verbatim (never a client
    tool call), streamed and not alike; the text's annotations do not get in the way;
    the next turn sends the item back as it came."""
    server_tool, kind = BUILT_IN[tool]
    reply = Reply(
        server_tools=[server_tool],
        text="It is sunny in Paris.",
        citations=[CITATION],
        tool_calls=[ToolCallReply("get_weather", {"city": "Paris"})],
    )
    async with serve([Rule(reply=reply)]) as sim:
        model = make_model("openai_responses", sim)
        options = ModelOptions(tools=(WEATHER,))
        response, chunks = await both(model, options)
        call = response.tool_calls[0]
        answer = ToolMessage(call_id=call.call_id, name=call.name, content="sunny")
        await model.complete([*HELLO, response.message, answer, UserMessage(content="more")])
        replayed = sim.requests[-1].body["input"]
    assert [b.kind for b in response.blocks] == [kind]
    item = response.blocks[0].data
    assert item["type"] == kind and item["status"] == "completed"
    if kind == "mcp_call":
        assert (item["server_label"], item["name"]) == ("docs", "lookup")
    assert response.text == "It is sunny in Paris."
    assert [c.name for c in response.tool_calls] == ["get_weather"]
    assert response.finish_reason == "tool_calls"
    calls = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert calls and {c.name for c in calls} == {"get_weather"}  # only the client's tool
    text = "".join(c.text for c in chunks if isinstance(c, TextDelta))
    assert text == "It is sunny in Paris."
    assert replayed[1] == item  # verbatim, before the text and the call
    assert [i.get("type") for i in replayed[2:4]] == [None, "function_call"]


async def test_citations_and_server_tools_are_read_on_each_wire(provider: str) -> None:
    """A reply with server tools and citations: read on each wire, streamed and not,
    the text kept whole."""
    reply = Reply(server_tools=[SEARCH], text="It is sunny in Paris.", citations=[CITATION])
    async with serve([Rule(reply=reply)]) as sim:
        response, chunks = await both(make_model(provider, sim))
    assert response.text == "It is sunny in Paris."
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == response.text
    assert not response.tool_calls and response.finish_reason == "stop"
    assert not any(isinstance(c, ToolCallDelta) for c in chunks)

"""The reply shapes providers send besides text and client tool calls: Anthropic's server
tools (input as input_json_delta, the first one empty), their result blocks, citations,
pause_turn; Chat Completions content as a list of parts (Mistral). Checked against the
official SDKs' types where they describe the shape."""

from __future__ import annotations

import json
from typing import Any

import anthropic
from pydantic import TypeAdapter
from sim_helpers import USER, Clients, anthropic_events, assert_no_extra, validate_anthropic

from raygent.sim import Reply, Rule, ServerToolReply, serve

CITATION = {
    "type": "web_search_result_location",
    "cited_text": "Sunny all week.",
    "url": "https://example.com/",
    "title": "Example Domain",
    "encrypted_index": "ZW5j",
}
SEARCH = Reply(
    server_tools=[ServerToolReply("web_search", {"query": "weather in Paris"})],
    text="It is sunny in Paris.",
    citations=[CITATION],
    finish="pause_turn",
)
MCP = Reply(
    server_tools=[ServerToolReply("lookup", {"id": 7}, server_name="docs")],
    text="Found it.",
)
BETA_EVENT: TypeAdapter[Any] = TypeAdapter(anthropic.types.beta.BetaRawMessageStreamEvent)


def _an(stream: bool = False) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 200, "messages": USER, "stream": stream}


async def test_server_tools_and_citations_in_a_message(clients: Clients) -> None:
    async with serve([Rule(reply=SEARCH)]) as sim:
        resp = await clients.http(sim).post("/v1/messages", json=_an())
    message = validate_anthropic(resp.json())
    kinds = [b.type for b in message.content]
    assert kinds == ["server_tool_use", "web_search_tool_result", "text"]
    use, result, text = message.content
    assert use.type == "server_tool_use" and use.input == {"query": "weather in Paris"}
    assert result.type == "web_search_tool_result" and result.tool_use_id == use.id
    assert text.type == "text" and text.citations is not None
    assert text.citations[0].model_dump() == CITATION
    assert message.stop_reason == "pause_turn"


async def test_server_tools_and_citations_in_a_stream(clients: Clients) -> None:
    async with serve([Rule(reply=SEARCH)]) as sim:
        resp = await clients.http(sim).post("/v1/messages", json=_an(stream=True))
    events = anthropic_events(resp.text)
    deltas = [(e.index, e.delta.type) for e in events if e.type == "content_block_delta"]
    inputs = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert inputs[0] == "" and json.loads("".join(inputs)) == {"query": "weather in Paris"}
    assert {i for i, kind in deltas if kind == "input_json_delta"} == {0}
    assert (2, "citations_delta") in deltas
    starts = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert starts == ["server_tool_use", "web_search_tool_result", "text"]
    # The SDK's own accumulation rebuilds the message the body would have been.
    async with serve([Rule(reply=SEARCH)]) as sim:
        client = clients.anthropic(sim)
        async with client.messages.stream(
            model="claude-x", max_tokens=200, messages=USER
        ) as stream:
            final = await stream.get_final_message()
    assert final.content[0].type == "server_tool_use"
    assert final.content[0].input == {"query": "weather in Paris"}
    assert final.content[2].type == "text" and final.content[2].citations
    assert final.stop_reason == "pause_turn"


async def test_mcp_tool_blocks_match_the_beta_types(clients: Clients) -> None:
    async with serve([Rule(reply=MCP)]) as sim:
        http = clients.http(sim)
        body = (await http.post("/v1/messages", json=_an())).json()
        raw = (await http.post("/v1/messages", json=_an(stream=True))).text
    message = anthropic.types.beta.BetaMessage.model_validate(body, strict=True)
    assert_no_extra(message)
    assert [b.type for b in message.content] == ["mcp_tool_use", "mcp_tool_result", "text"]
    use = message.content[0]
    assert use.type == "mcp_tool_use" and use.server_name == "docs" and use.input == {"id": 7}
    for block in raw.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        if lines["event"] != "ping":
            assert_no_extra(BETA_EVENT.validate_json(lines["data"], strict=True))


async def test_chat_content_as_a_list_of_parts(clients: Clients) -> None:
    reply = Reply(thinking="Let me think.", text="Hello!", list_content=True)
    body = {"model": "mistral", "messages": USER}
    async with serve([Rule(reply=reply)]) as sim:
        http = clients.http(sim)
        message = (await http.post("/v1/chat/completions", json=body)).json()["choices"][0]
        raw = (await http.post("/v1/chat/completions", json={**body, "stream": True})).text
    assert message["message"]["content"] == [
        {"type": "thinking", "thinking": [{"type": "text", "text": "Let me think."}]},
        {"type": "text", "text": "Hello!"},
    ]
    datas = [line[6:] for line in raw.split("\n") if line.startswith("data: ")][:-1]
    contents = [c["delta"].get("content") for d in datas for c in json.loads(d)["choices"]]
    parts = [p for c in contents if isinstance(c, list) for p in c]
    thinking = "".join(t["text"] for p in parts if p["type"] == "thinking" for t in p["thinking"])
    text = "".join(p["text"] for p in parts if p["type"] == "text")
    assert (thinking, text) == ("Let me think.", "Hello!")


async def test_server_tools_have_no_chat_form(clients: Clients) -> None:
    async with serve([Rule(reply=SEARCH)]) as sim:
        client = clients.openai(sim)
        reply = await client.chat.completions.create(model="gpt-4o", messages=USER)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "It is sunny in Paris."

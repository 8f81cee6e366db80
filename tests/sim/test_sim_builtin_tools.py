"""Server tools and citations on the OpenAI wires: Responses built-in tool call items
(``web_search_call``, ``mcp_call``, ``code_interpreter_call``, ``tool_search_call``)
with their stream events, ``url_citation`` annotations on both wires, and built-in
items a client replays as input. Checked against the official SDK's types and client."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter
from sim_helpers import USER, Clients, assert_no_extra, openai_chunks, validate_openai

from raygent.sim import Reply, Rule, ServerToolReply, serve

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
CITATION = {
    "type": "web_search_result_location",
    "cited_text": "sunny",
    "url": "https://example.com/",
    "title": "Example Domain",
    "encrypted_index": "ZW5j",
}
TEXT = "It is sunny in Paris."
ANNOTATION = {
    "type": "url_citation",
    "start_index": 6,
    "end_index": 11,
    "url": "https://example.com/",
    "title": "Example Domain",
}
TOOLS = Reply(
    server_tools=[
        ServerToolReply("web_search", {"query": "weather in Paris"}),
        ServerToolReply("lookup", {"id": 7}, server_name="docs"),
        ServerToolReply("code_execution", {"code": "print(1)"}),
        ServerToolReply("web_fetch", {"url": "https://example.com/"}),
        ServerToolReply("tool_search_tool_regex", {"pattern": "weather"}),
    ],
    text=TEXT,
    citations=[CITATION],
)
KINDS = [
    "web_search_call",
    "mcp_call",
    "code_interpreter_call",
    "web_search_call",
    "tool_search_call",
    "message",
]


def _events(raw: str) -> list[Any]:
    events = []
    for block in raw.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        event = EVENTS.validate_json(lines["data"], strict=True)
        assert event.type == lines["event"]
        assert_no_extra(event)
        events.append(event)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    return events


def _check_output(final: Response) -> None:
    assert [item.type for item in final.output] == KINDS
    search, mcp, code, fetch, tool_search, message = final.output
    assert search.type == "web_search_call" and search.status == "completed"
    assert search.action.type == "search" and search.action.query == "weather in Paris"
    assert mcp.type == "mcp_call" and (mcp.server_label, mcp.name) == ("docs", "lookup")
    assert json.loads(mcp.arguments) == {"id": 7} and mcp.output == "done"
    assert code.type == "code_interpreter_call" and code.code == "print(1)"
    assert fetch.type == "web_search_call" and fetch.action.type == "open_page"
    assert tool_search.type == "tool_search_call" and tool_search.execution == "server"
    assert message.type == "message"
    part = message.content[0]
    assert part.type == "output_text" and part.text == TEXT
    assert [a.model_dump() for a in part.annotations] == [ANNOTATION]


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
async def test_responses_built_in_items_are_strictly_valid(clients: Clients, stream: bool) -> None:
    body = {"model": "m", "input": "weather?", "stream": stream}
    async with serve([Rule(reply=TOOLS)]) as sim:
        resp = await clients.http(sim).post("/v1/responses", json=body)
    assert resp.status_code == 200
    if not stream:
        final = Response.model_validate(resp.json(), strict=True)
        assert_no_extra(final)
        _check_output(final)
        return
    events = _events(resp.text)
    _check_output(events[-1].response)
    names = [e.type for e in events]
    web = names.index("response.web_search_call.in_progress")
    assert names[web - 1 : web + 4] == [
        "response.output_item.added",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
        "response.output_item.done",
    ]
    mcp = [e for e in events if e.type.startswith("response.mcp_call")]
    assert mcp[0].type == "response.mcp_call.in_progress"
    assert mcp[-1].type == "response.mcp_call.completed"
    args = "".join(e.delta for e in mcp if e.type == "response.mcp_call_arguments.delta")
    assert json.loads(args) == {"id": 7}
    code = [e for e in events if e.type.startswith("response.code_interpreter_call")]
    assert "".join(e.delta for e in code if e.type.endswith("code.delta")) == "print(1)"
    assert code[-1].type == "response.code_interpreter_call.completed"
    notes = [e for e in events if e.type == "response.output_text.annotation.added"]
    assert [(n.annotation_index, n.annotation.model_dump()) for n in notes] == [(0, ANNOTATION)]
    added = [e for e in events if e.type == "response.output_item.added"]
    assert {e.item.status for e in added if e.item.type != "message"} == {"in_progress"}


async def test_responses_built_in_items_through_the_sdk(clients: Clients) -> None:
    async with serve([Rule(reply=TOOLS)]) as sim:
        client = clients.openai(sim)
        async with client.responses.stream(model="m", input="weather?") as stream:
            async for _ in stream:
                pass
            final = await stream.get_final_response()
        created = await client.responses.create(model="m", input="weather?")
    for response in (final, created):
        _check_output(response)
        assert response.output_text == TEXT


async def test_responses_accepts_built_in_items_replayed_as_input(clients: Clients) -> None:
    async with serve([Rule(reply=TOOLS)]) as sim:
        client = clients.openai(sim)
        first = await client.responses.create(model="m", input="weather?")
        replay = [
            {"role": "user", "content": "weather?"},
            *(item.model_dump(exclude_none=True) for item in first.output),
            {"role": "user", "content": "and tomorrow?"},
        ]
        again = await client.responses.create(model="m", input=replay)  # type: ignore[arg-type]
        sent = sim.requests[-1].body["input"]
    assert again.output_text == TEXT
    assert [i.get("type") for i in sent[1:-1]] == KINDS


async def test_responses_still_refuses_an_unknown_input_item(clients: Clients) -> None:
    body = {"model": "m", "input": [{"type": "made_up_call", "id": "x"}]}
    async with serve([Rule(reply=TOOLS)]) as sim:
        resp = await clients.http(sim).post("/v1/responses", json=body)
    assert resp.status_code == 400 and "Invalid input item type" in resp.text


CHAT_ANNOTATION = {"type": "url_citation", "url_citation": {**ANNOTATION}}
del CHAT_ANNOTATION["url_citation"]["type"]


async def test_chat_citations_are_message_annotations(clients: Clients) -> None:
    body = {"model": "gpt-4o", "messages": USER}
    async with serve([Rule(reply=TOOLS)]) as sim:
        resp = await clients.http(sim).post("/v1/chat/completions", json=body)
        raw = await clients.http(sim).post("/v1/chat/completions", json={**body, "stream": True})
        client = clients.openai(sim)
        stream = await client.chat.completions.create(model="gpt-4o", messages=USER, stream=True)  # type: ignore[arg-type]
        sdk_chunks = [chunk async for chunk in stream]
    message = validate_openai(resp.json()).choices[0].message
    assert message.content == TEXT  # server tools have no Chat form: left out
    assert [a.model_dump() for a in message.annotations or ()] == [CHAT_ANNOTATION]
    # The stream sends them in a delta of their own after the text, as the API does
    # (the SDK's ChoiceDelta does not declare the field: it is an extra there).
    datas = [json.loads(line[6:]) for line in raw.text.split("\n") if line[6:7] == "{"]
    deltas = [c["delta"] for d in datas for c in d["choices"]]
    notes = [d.pop("annotations") for d in deltas if "annotations" in d]
    assert notes == [[CHAT_ANNOTATION]]
    stripped = "".join(f"data: {json.dumps(d)}\n\n" for d in datas) + "data: [DONE]\n\n"
    text = "".join(c.choices[0].delta.content or "" for c in openai_chunks(stripped) if c.choices)
    assert text == TEXT
    extras = [c.choices[0].delta.model_extra for c in sdk_chunks if c.choices]
    assert [e["annotations"] for e in extras if e and "annotations" in e] == [[CHAT_ANNOTATION]]


async def test_chat_without_citations_keeps_an_empty_annotation_list(clients: Clients) -> None:
    async with serve([Rule(reply=Reply(text="hi"))]) as sim:
        client = clients.openai(sim)
        reply = await client.chat.completions.create(model="gpt-4o", messages=USER)  # type: ignore[arg-type]
    assert reply.choices[0].message.annotations == []

"""Tool results holding images, as each wire carries them, against the simulator over HTTP:
accepted in the shapes the APIs take, refused (400) in those they refuse, and read as
the turn after the tool results."""

from __future__ import annotations

from typing import Any

from sim_helpers import Clients

from raygent.sim import Match, Reply, Rule, serve

PNG_URL = "data:image/png;base64,iVBORw0KGgo="
SCRIPT = [
    Rule(match=Match(after_tool_result=True), reply=Reply(text="after the tools")),
    Rule(match=Match(), reply=Reply(text="a user turn")),
]
CALL = {"id": "call_1", "type": "function", "function": {"name": "chart", "arguments": "{}"}}


def chat(*after: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": "gpt-x",
        "messages": [
            {"role": "user", "content": "Chart it."},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            *after,
        ],
    }


async def test_chat_reads_the_images_after_tool_messages_as_the_tool_turn(
    clients: Clients,
) -> None:
    tool = {"role": "tool", "tool_call_id": "call_1", "content": "[1 image]"}
    images = {
        "role": "user",
        "content": [
            {"type": "text", "text": "The image of tool call call_1 (chart):"},
            {"type": "image_url", "image_url": {"url": PNG_URL}},
        ],
    }
    question = {"role": "user", "content": "And now?"}
    in_tool = {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": [{"type": "image_url", "image_url": {"url": PNG_URL}}],
    }
    async with serve(SCRIPT) as sim:
        http = clients.http(sim)
        answers = [
            await http.post("/v1/chat/completions", json=chat(*body))
            for body in ([tool, images], [tool, question], [in_tool])
        ]
    with_images, asked, refused = answers
    assert with_images.json()["choices"][0]["message"]["content"] == "after the tools"
    assert asked.json()["choices"][0]["message"]["content"] == "a user turn"
    assert refused.status_code == 400
    assert "role 'tool' takes text parts only" in refused.json()["error"]["message"]


async def test_responses_take_text_and_image_items_in_a_function_call_output(
    clients: Clients,
) -> None:
    def body(output: Any) -> dict[str, Any]:
        return {
            "model": "gpt-x",
            "input": [
                {"role": "user", "content": "Chart it."},
                {"type": "function_call", "call_id": "call_1", "name": "chart", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": output},
            ],
        }

    good = [
        {"type": "input_text", "text": "the chart:"},
        {"type": "input_image", "image_url": PNG_URL, "detail": "auto"},
    ]
    bad = [{"type": "image_url", "image_url": {"url": PNG_URL}}]
    async with serve(SCRIPT) as sim:
        http = clients.http(sim)
        accepted = await http.post("/v1/responses", json=body(good))
        refused = await http.post("/v1/responses", json=body(bad))
    assert accepted.status_code == 200
    assert accepted.json()["output"][0]["content"][0]["text"] == "after the tools"
    assert refused.status_code == 400


async def test_anthropic_takes_image_blocks_in_a_tool_result(clients: Clients) -> None:
    def body(content: list[dict[str, Any]]) -> dict[str, Any]:
        use = {"type": "tool_use", "id": "toolu_1", "name": "chart", "input": {}}
        result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": content}
        return {
            "model": "claude-x",
            "max_tokens": 100,
            "messages": [
                {"role": "user", "content": "Chart it."},
                {"role": "assistant", "content": [use]},
                {"role": "user", "content": [result]},
            ],
        }

    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    nested = {"type": "tool_use", "id": "toolu_2", "name": "chart", "input": {}}
    async with serve(SCRIPT) as sim:
        http = clients.http(sim)
        accepted = await http.post(
            "/v1/messages", json=body([{"type": "text", "text": "a"}, image])
        )
        refused = await http.post("/v1/messages", json=body([nested]))
    assert accepted.status_code == 200
    assert accepted.json()["content"][0]["text"] == "after the tools"
    assert refused.status_code == 400

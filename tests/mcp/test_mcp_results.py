"""Tool results beyond text, against the simulator on each wire and both backends: an MCP
server's images reach the model as image parts of the tool result (Chat Completions: a
user message after the tool messages), its structured content stays on the report, and
ordinary tools may return images too, checked like attachments."""

from __future__ import annotations

import base64
import itertools
import sys
from pathlib import Path
from typing import Any

import pytest

import raygent
import raygent.mcp
from raygent import AnthropicModel, ImagePart, OpenAIModel, OpenAIResponsesModel
from raygent.sim import Match, Reply, Rule, Simulator, ToolCallReply, serve
from raygent.tools import ToolResult

SERVER = str(Path(__file__).with_name("server.py"))
PNG = (  # the server's 1x1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="
)
DATA_URL = f"data:image/png;base64,{PNG}"
WIRES = ["chat", "responses", "anthropic"]


def make_model(wire: str, sim: Simulator, **kwargs: Any) -> Any:
    if wire == "chat":
        return OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-test", **kwargs)
    if wire == "responses":
        return OpenAIResponsesModel(
            "sim-gpt", base_url=sim.openai_base_url, api_key="sk-test", **kwargs
        )
    return AnthropicModel(
        "sim-claude", base_url=sim.anthropic_base_url, api_key="sk-test", **kwargs
    )


def rules(*calls: ToolCallReply) -> list[Rule]:
    return [
        Rule(match=Match(after_tool_result=False), reply=Reply(tool_calls=list(calls))),
        Rule(match=Match(after_tool_result=True), reply=Reply(text="seen")),
    ]


@raygent.tool
def snapshot() -> list[Any]:
    """A caption and an image."""
    return ["a snapshot:", ImagePart(data=PNG, media_type="image/png")]


@raygent.tool
def measured() -> ToolResult:
    """Text for the model, data for the program."""
    return ToolResult(content="12 m", data={"metres": 12})


def images_sent(wire: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """(call id, image URL) of every tool-result image in a request body."""
    found: list[tuple[str, str]] = []
    if wire == "chat":
        messages = body["messages"]
        for before, message in itertools.pairwise(messages):
            if message["role"] == "user" and before["role"] == "tool":
                call = ""
                for part in message["content"]:
                    if part["type"] == "text":
                        call = part["text"].split("tool call ")[1].split()[0].rstrip(":")
                    else:
                        found.append((call, part["image_url"]["url"]))
    elif wire == "responses":
        for item in body["input"]:
            if item.get("type") == "function_call_output" and isinstance(item["output"], list):
                found.extend(
                    (item["call_id"], p["image_url"])
                    for p in item["output"]
                    if p["type"] == "input_image"
                )
    else:
        for turn in body["messages"]:
            for block in turn["content"]:
                if block["type"] == "tool_result" and isinstance(block["content"], list):
                    found.extend(
                        (block["tool_use_id"], f"data:image/png;base64,{b['source']['data']}")
                        for b in block["content"]
                        if b["type"] == "image"
                    )
    return found


@pytest.mark.parametrize("wire", WIRES)
async def test_images_and_structured_content_reach_the_model_and_the_report(
    wire: str, backend_kind: str
) -> None:
    toolset = raygent.mcp.stdio(
        sys.executable, [SERVER], include=["chart", "weather", "reading", "fake_image"]
    )
    calls = (
        ToolCallReply("chart", {}),
        ToolCallReply("weather", {"city": "Oslo"}),
        ToolCallReply("reading", {}),
        ToolCallReply("fake_image", {}),
        ToolCallReply("snapshot", {}),
        ToolCallReply("measured", {}),
    )
    try:
        async with serve(rules(*calls)) as sim:
            bot = raygent.agent(model=make_model(wire, sim), tools=[toolset, snapshot, measured])
            result = await bot.execute("look")
            follow_up = sim.requests[1].body
        assert result.ok, result.error
        assert result.text == "seen"  # the sim read the images as part of the tool results
        report = {c.name: c for c in result.report.tool_calls}
        assert (report["chart"].output, report["chart"].images) == (
            "the chart:\n[audio audio/wav, 4 bytes: not shown]",
            1,
        )
        assert report["weather"].output == "Oslo: 18C"
        assert report["weather"].data == {"city": "Oslo", "celsius": 18}
        assert (report["reading"].output, report["reading"].data) == (
            '{"celsius":18}',
            {"celsius": 18},
        )
        assert (report["fake_image"].error or {}).get("code") == "ATTACHMENT"
        assert "not a image/png image" in (report["fake_image"].error or {})["message"]
        assert (report["snapshot"].output, report["snapshot"].images) == ("a snapshot:", 1)
        assert (report["measured"].output, report["measured"].data) == ("12 m", {"metres": 12})
        assert follow_up is not None
        ids = {c.name: c.call_id for c in result.report.tool_calls}
        assert images_sent(wire, follow_up) == [
            (ids["chart"], DATA_URL),
            (ids["snapshot"], DATA_URL),
        ]
    finally:
        await toolset.aclose()


async def test_a_model_without_vision_gets_a_note_instead(backend_kind: str) -> None:
    async with serve(rules(ToolCallReply("snapshot", {}))) as sim:
        bot = raygent.agent(model=make_model("chat", sim, vision=False), tools=[snapshot])
        result = await bot.execute("look")
        follow_up = sim.requests[1].body
    assert result.ok, result.error
    [call] = result.report.tool_calls
    assert call.images == 0
    assert call.output == "a snapshot:[an image: not shown, this model takes no images]"
    assert follow_up is not None and images_sent("chat", follow_up) == []


async def test_a_tool_image_from_a_path_is_read_under_the_attachment_policy(
    tmp_path: Path, backend_kind: str
) -> None:
    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir()
    outside.mkdir()
    (inside / "a.png").write_bytes(base64.b64decode(PNG))
    (outside / "b.png").write_bytes(base64.b64decode(PNG))
    (inside / "c.png").write_bytes(b"<html>not a picture</html>")

    @raygent.tool
    def picture(name: str) -> ImagePart:
        """A picture from disk."""
        return ImagePart(path=str(tmp_path / name))

    calls = [ToolCallReply("picture", {"name": n}) for n in ("in/a.png", "out/b.png", "in/c.png")]
    policy = raygent.AttachmentPolicy(allowed_roots=(inside,))
    async with serve(rules(*calls)) as sim:
        bot = raygent.agent(model=make_model("anthropic", sim), tools=[picture])
        result = await bot.execute("look", attachment_policy=policy)
        follow_up = sim.requests[1].body
    assert result.ok, result.error
    read, refused, disguised = result.report.tool_calls
    assert read.images == 1 and read.error is None
    assert (refused.error or {}).get("code") == "OUTBOUND_POLICY"
    assert (disguised.error or {}).get("code") == "ATTACHMENT"
    assert follow_up is not None
    assert images_sent("anthropic", follow_up) == [(read.call_id, DATA_URL)]

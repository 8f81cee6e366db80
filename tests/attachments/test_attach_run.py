"""Attachments on agent runs, against the provider simulator over real HTTP."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from attach_support import PNG, FileServer

import raygent
from raygent import AttachmentPolicy, OutboundPolicy
from raygent.errors import InvalidRequestError, OutboundPolicyError
from raygent.models import Capabilities
from raygent.sim import Match, Reply, Rule, Simulator, serve

KEY = "sk-test-key-000000"
PNG64 = base64.b64encode(PNG).decode()
LOCAL_FETCH = AttachmentPolicy(
    allow_remote_fetch=True,
    outbound=OutboundPolicy(schemes=("http",), trusted_networks=("127.0.0.1/32",)),
)


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with serve([Rule(match=Match(), reply=Reply(text="Seen it."))]) as server:
        yield server


def model(sim: Simulator, provider: str = "openai", vision: bool = True) -> Any:
    caps = Capabilities(vision=vision)
    if provider == "openai":
        return raygent.OpenAIModel(
            "sim-gpt", base_url=sim.openai_base_url, api_key=KEY, capabilities=caps
        )
    return raygent.AnthropicModel(
        "sim-claude", base_url=sim.anthropic_base_url, api_key=KEY, capabilities=caps
    )


def user_content(sim: Simulator) -> Any:
    """The content of the last user message of the last request the simulator got."""
    body = sim.requests[-1].body
    return [m for m in body["messages"] if m["role"] == "user"][-1]["content"]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_local_image_and_a_document_reach_the_provider(
    sim: Simulator, provider: str, tmp_path: Path
) -> None:
    (tmp_path / "cat.png").write_bytes(PNG)
    (tmp_path / "notes.txt").write_text("Ship on Friday.", encoding="utf-8")
    bot = raygent.agent(
        model=model(sim, provider), attachment_policy=AttachmentPolicy(allowed_roots=[tmp_path])
    )
    result = await bot.execute(
        "What do you see?", attachments=[str(tmp_path / "cat.png"), str(tmp_path / "notes.txt")]
    )
    assert result.ok, result.error
    image, doc, question = user_content(sim)
    if provider == "openai":
        assert image == {
            "type": "image_url",
            "image_url": {"url": f"data:image/png;base64,{PNG64}"},
        }
    else:
        assert image["source"] == {"type": "base64", "media_type": "image/png", "data": PNG64}
    assert doc["text"] == '<document name="notes.txt">\nShip on Friday.\n</document>\n'
    assert question["text"] == "What do you see?"


async def test_base64_images_and_image_urls_are_sent_as_given(sim: Simulator) -> None:
    bot = raygent.agent(model=model(sim, "anthropic"))
    result = await bot.execute(
        "Compare.",
        attachments=[
            {"type": "image", "source": {"base64": PNG64, "media_type": "image/png"}},
            "https://images.example.com/dog.jpg",
        ],
    )
    assert result.ok, result.error
    inline, remote, _ = user_content(sim)
    assert inline["source"] == {"type": "base64", "media_type": "image/png", "data": PNG64}
    # Not fetched here: the provider gets the URL.
    assert remote["source"] == {"type": "url", "url": "https://images.example.com/dog.jpg"}


async def test_a_model_without_vision_fails_typed_before_any_request(
    sim: Simulator, tmp_path: Path
) -> None:
    (tmp_path / "cat.png").write_bytes(PNG)
    bot = raygent.agent(
        model=model(sim, vision=False), attachment_policy=AttachmentPolicy(allowed_roots=[tmp_path])
    )
    result = await bot.execute("Look.", attachments=[str(tmp_path / "cat.png")])
    assert isinstance(result.error, InvalidRequestError)
    assert (
        result.report.status == "failed"
        and result.report.error["code"] == "PROVIDER_INVALID_REQUEST"
    )
    assert sim.stats().requests == 0


async def test_remote_text_is_refused_by_default_and_nothing_is_requested(sim: Simulator) -> None:
    async with FileServer() as files:
        bot = raygent.agent(model=model(sim))
        result = await bot.execute("Summarise.", attachments=[files.url("/doc.txt")])
    assert isinstance(result.error, OutboundPolicyError)
    assert result.error.reason == "remote_fetch_disabled"
    assert result.report.status == "failed" and result.report.error["code"] == "OUTBOUND_POLICY"
    assert files.seen == [] and sim.stats().requests == 0


async def test_remote_text_is_fetched_when_the_call_allows_it(sim: Simulator) -> None:
    async with FileServer() as files:
        bot = raygent.agent(model=model(sim))
        result = await bot.execute(
            "Summarise.", attachments=[files.url("/doc.txt")], attachment_policy=LOCAL_FETCH
        )
    assert result.ok, result.error
    # Text-only content goes on the OpenAI wire as one string.
    assert user_content(sim) == (
        '<document name="doc.txt">\nQuarterly notes: revenue up.\n</document>\nSummarise.'
    )


async def test_a_policy_refusal_on_a_stream_ends_it_failed(sim: Simulator) -> None:
    bot = raygent.agent(model=model(sim), attachment_policy=LOCAL_FETCH)
    stream = bot.stream("Read.", attachments=["http://10.0.0.7/doc.txt"])
    events = [event.type async for event in stream]
    result = await stream.result
    assert isinstance(result.error, OutboundPolicyError) and result.error.reason == "private"
    assert events == ["agent.starting", "agent.error"]
    assert sim.stats().requests == 0


async def test_an_abort_while_downloading_cancels_the_run(sim: Simulator) -> None:
    controller = raygent.AbortController()
    async with FileServer() as files:
        bot = raygent.agent(model=model(sim), attachment_policy=LOCAL_FETCH)
        run = asyncio.ensure_future(
            bot.execute("Read.", attachments=[files.url("/hang.txt")], signal=controller.signal)
        )
        await files.arrived.wait()
        controller.abort("user left")
        result = await run
    assert result.report.status == "cancelled"
    assert result.error is not None and result.error.code == "AGENT_CANCELLED"
    assert sim.stats().requests == 0


async def test_attachments_go_into_the_stored_input_message(sim: Simulator) -> None:
    from raygent.stores import InMemoryStore

    bot = raygent.agent(model=model(sim), memory=raygent.Memory(store=InMemoryStore()))
    chat = bot.session("s-1")
    image = {"type": "image", "source": {"base64": PNG64, "media_type": "image/png"}}
    result = await chat.execute("Keep this.", attachments=[image])
    assert result.ok, result.error
    stored = await chat.history()
    assert stored[0].content[0] == raygent.ImagePart(data=PNG64, media_type="image/png")
    assert stored[0].text == "Keep this."

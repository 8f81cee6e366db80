"""The OpenAI adapter infers `vision` from the model name: image models take an attached
image; text-only models refuse it with a typed error before any request; an explicit
`vision=` wins either way."""

from __future__ import annotations

from typing import Any

import raygent
from raygent import Capabilities, OpenAIModel
from raygent.errors import InvalidRequestError
from raygent.sim import Reply, Rule, serve

PNG_B64 = (  # a 1x1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ"
    "AAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="
)
IMAGE = {"type": "image", "source": {"base64": PNG_B64, "media_type": "image/png"}}
VISION = ["gpt-4o", "gpt-4o-mini", "gpt-4.1", "o1", "o3", "o4-mini", "gpt-5", "gpt-4-turbo"]
TEXT_ONLY = [
    "gpt-3.5-turbo",
    "gpt-3.5-turbo-0125",
    "gpt-4",
    "gpt-4-0613",
    "gpt-4-32k",
    "gpt-4-1106-preview",
    "o1-mini",
    "o1-preview",
    "o3-mini",
    "o3-mini-2025-01-31",
    "text-davinci-003",
    "davinci-002",
    "ft:gpt-3.5-turbo-0125:acme::abc123",
]


def _images_sent(body: dict[str, Any]) -> int:
    return sum(
        1
        for message in body["messages"]
        if isinstance(message["content"], list)
        for part in message["content"]
        if part["type"] == "image_url"
    )


async def _run_with_an_image(model: OpenAIModel) -> Any:
    bot = raygent.agent(model=model)
    return await bot.execute("What is this?", attachments=[IMAGE])


def test_vision_is_inferred_from_the_name() -> None:
    assert [n for n in VISION if not OpenAIModel(n, api_key="k").capabilities.vision] == []
    assert [n for n in TEXT_ONLY if OpenAIModel(n, api_key="k").capabilities.vision] == []


async def test_image_models_take_an_image_and_text_only_models_refuse_it() -> None:
    async with serve([Rule(reply=Reply(text="a pixel"))]) as sim:
        for name in VISION:
            model = OpenAIModel(name, base_url=sim.openai_base_url, api_key="sk-test-key-0000")
            result = await _run_with_an_image(model)
            assert result.report.status == "completed", (name, result.error)
            assert _images_sent(sim.requests[-1].body) == 1, name
        sent = sim.stats().requests
        for name in TEXT_ONLY:
            model = OpenAIModel(name, base_url=sim.openai_base_url, api_key="sk-test-key-0000")
            result = await _run_with_an_image(model)
            assert isinstance(result.error, InvalidRequestError), name
            assert result.report.status == "failed" and "vision" in result.error.message
        assert sim.stats().requests == sent  # refused before any request


async def test_an_explicit_vision_wins() -> None:
    async with serve([Rule(reply=Reply(text="a pixel"))]) as sim:
        url, key = sim.openai_base_url, "sk-test-key-0000"
        told = OpenAIModel("gpt-3.5-turbo", base_url=url, api_key=key, vision=True)
        assert (await _run_with_an_image(told)).report.status == "completed"
        assert _images_sent(sim.requests[-1].body) == 1
        sent = sim.stats().requests
        blind = OpenAIModel("gpt-4o", base_url=url, api_key=key, vision=False)
        assert isinstance((await _run_with_an_image(blind)).error, InvalidRequestError)
        assert sim.stats().requests == sent
    # Over `capabilities=` too; the other capabilities are kept.
    caps = Capabilities(vision=False, reasoning=True)
    model = OpenAIModel("local", api_key=key, capabilities=caps, vision=True)
    assert model.capabilities == Capabilities(vision=True, reasoning=True)

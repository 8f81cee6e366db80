"""The simulator's tiers read by the official SDKs (issue 40.3, 40.5): each tier's reply
shape, streamed and not; the capacity refusal's body; a tier the provider does not know;
the prices genai-prices knows per tier."""

from __future__ import annotations

import anthropic
import openai
import pytest
from tiers_support import KEY, model, rules

import raygent
from raygent.errors import RateLimitError
from raygent.pricing import lookup_pricing
from raygent.sim import ServiceTiers, serve
from raygent.sim._tiers import TierDesk
from raygent.sim._types import ParsedRequest

ASK = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("asked", "served"),
    [(None, "default"), ("auto", "default"), ("default", "default"), ("flex", "flex"),
     ("priority", "priority")],
)  # fmt: skip
async def test_openai_replies_name_the_tier_served(asked: str | None, served: str) -> None:
    extra = {} if asked is None else {"service_tier": asked}
    with serve(rules()) as sim:
        client = openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key=KEY, max_retries=0)
        chat = await client.chat.completions.create(model="gpt-5-mini", messages=ASK, **extra)  # type: ignore[arg-type, call-overload]
        chunks = await client.chat.completions.create(
            model="gpt-5-mini",
            messages=ASK,
            stream=True,
            **extra,  # type: ignore[arg-type, call-overload]
        )
        streamed = {chunk.service_tier async for chunk in chunks}
        response = await client.responses.create(model="gpt-5-mini", input="hi", **extra)  # type: ignore[arg-type]
        events = await client.responses.create(model="gpt-5-mini", input="hi", stream=True, **extra)  # type: ignore[arg-type]
        finals = [e.response.service_tier async for e in events if e.type == "response.completed"]
        await client.close()
    assert chat.service_tier == served and streamed == {served}
    assert response.service_tier == served and finals == [served]


@pytest.mark.parametrize(
    ("asked", "priority", "served"),
    [("auto", False, "standard"), ("auto", True, "priority"),
     ("standard_only", True, "standard"), (None, True, "standard")],
)  # fmt: skip
async def test_anthropic_replies_name_the_tier_in_usage(
    asked: str | None, priority: bool, served: str
) -> None:
    extra = {} if asked is None else {"service_tier": asked}
    with serve(rules(), tiers=ServiceTiers(anthropic_priority=priority)) as sim:
        client = anthropic.AsyncAnthropic(base_url=sim.anthropic_base_url, api_key=KEY)
        message = await client.messages.create(
            model="claude-haiku-4-5",
            max_tokens=50,
            messages=ASK,
            **extra,  # type: ignore[arg-type]
        )
        async with client.messages.stream(
            model="claude-haiku-4-5",
            max_tokens=50,
            messages=ASK,
            **extra,  # type: ignore[arg-type]
        ) as stream:
            final = await stream.get_final_message()
        await client.close()
    assert message.usage.service_tier == served and final.usage.service_tier == served


async def test_flex_refused_for_capacity_is_the_documented_429() -> None:
    with serve(rules(), tiers=ServiceTiers(flex_refusal_rate=1.0)) as sim:
        client = openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key=KEY, max_retries=0)
        with pytest.raises(openai.RateLimitError) as refused:
            await client.chat.completions.create(
                model="gpt-5-mini",
                messages=ASK,
                service_tier="flex",  # type: ignore[arg-type]
            )
        fine = await client.chat.completions.create(
            model="gpt-5-mini",
            messages=ASK,
            service_tier="priority",  # type: ignore[arg-type]
        )
        await client.close()
        # Without a fallback the adapter's error says why (and nothing is sent again).
        with pytest.raises(RateLimitError) as typed:
            await model(sim, service_tier="flex").complete([raygent.UserMessage(content="hi")])
    assert refused.value.status_code == 429 and refused.value.code == "resource_unavailable"
    assert "Resource Unavailable" in refused.value.message and fine.service_tier == "priority"
    assert typed.value.provider_code == "resource_unavailable"


async def test_a_tier_the_provider_does_not_know_is_a_400() -> None:
    with serve(rules()) as sim:
        client = openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key=KEY, max_retries=0)
        with pytest.raises(openai.BadRequestError, match="service_tier"):
            await client.chat.completions.create(
                model="gpt-5-mini",
                messages=ASK,
                service_tier="cheap",  # type: ignore[arg-type]
            )
        await client.close()
        claude = anthropic.AsyncAnthropic(base_url=sim.anthropic_base_url, api_key=KEY)
        with pytest.raises(anthropic.BadRequestError, match="service_tier"):
            await claude.messages.create(
                model="claude-haiku-4-5",
                max_tokens=9,
                messages=ASK,
                service_tier="flex",  # type: ignore[arg-type]
            )
        await claude.close()


def _request(tier: str | None, api: str = "openai") -> ParsedRequest:
    return ParsedRequest(
        api=api, model="m", stream=False, system_text="", last_user_text="hi",  # type: ignore[arg-type]
        has_tools=False, after_tool_result=False, max_tokens=None, include_usage=False,
        response_schema=None, json_mode=False, input_tokens=5, prior_tool_calls=0,
        service_tier=tier,
    )  # fmt: skip


def test_the_desk_refuses_a_seeded_share_of_flex_and_scales_latency() -> None:
    from raygent.sim._server import OPENAI

    desk = TierDesk(ServiceTiers(flex_refusal_rate=0.5, seed=7))
    first = [desk.admit(OPENAI, _request("flex"), "r") is not None for _ in range(200)]
    desk.reset()
    again = [desk.admit(OPENAI, _request("flex"), "r") is not None for _ in range(200)]
    assert first == again and 60 < sum(first) < 140  # seeded, about half
    assert all(desk.admit(OPENAI, _request(t), "r") is None for t in ("default", "priority"))
    scales = {}
    for tier in ("default", "flex", "priority"):
        req = _request(tier)
        desk.admit(OPENAI, req, "r")
        scales[tier] = desk.latency(req)
    assert scales == {"default": 1.0, "flex": 3.0, "priority": 0.5}


def test_genai_prices_tier_rates_where_it_knows_them() -> None:
    default = lookup_pricing("openai", "gpt-5-mini")
    flex = lookup_pricing("openai", "gpt-5-mini", tier="flex")
    priority = lookup_pricing("openai", "gpt-5-mini", tier="priority")
    assert default is not None and flex is not None and priority is not None
    assert flex.input_per_mtok == pytest.approx(default.input_per_mtok / 2)
    assert priority.output_per_mtok > default.output_per_mtok
    # A tier genai-prices does not know for a model: flex at the batch rates.
    mini = lookup_pricing("openai", "gpt-4o-mini")
    mini_flex = lookup_pricing("openai", "gpt-4o-mini", tier="flex")
    assert mini is not None and mini_flex is not None
    assert mini_flex.input_per_mtok == pytest.approx(mini.input_per_mtok / 2)


async def test_a_real_models_reply_is_priced_at_genai_prices_tier_rates() -> None:
    with serve(rules()) as sim:
        gpt = raygent.OpenAIModel("gpt-5-mini", base_url=sim.openai_base_url, api_key=KEY)
        ask = [raygent.UserMessage(content="hi")]
        default = await gpt.complete(ask)
        flex = await gpt.complete(ask, raygent.ModelOptions(service_tier="flex"))
    assert flex.service_tier == "flex" and default.service_tier == "default"
    assert default.usage.cost is not None and flex.usage.cost is not None
    assert flex.usage.cost.total == pytest.approx(default.usage.cost.total / 2)

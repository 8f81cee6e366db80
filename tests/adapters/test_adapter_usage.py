"""Usage from both wires: cache reads and writes, reasoning tokens, per-channel cost;
thinking blocks replayed verbatim."""

from __future__ import annotations

import pytest
from adapter_support import make_model

from raygent import AssistantMessage, ModelOptions, Pricing, SystemMessage, UserMessage
from raygent.models import CacheControl, ReasoningOptions, TextDelta
from raygent.sim import Reply, Rule, serve

PRICING = Pricing(
    input_per_mtok=3.0,
    output_per_mtok=15.0,
    cached_input_per_mtok=0.3,
    cache_write_per_mtok=3.75,
    reasoning_per_mtok=15.0,
)
LONG_SYSTEM = SystemMessage(content="You follow the house rules. " * 400)  # ~2.7k tokens


async def test_anthropic_cache_writes_then_reads() -> None:
    options = ModelOptions(cache_control=CacheControl(breakpoints=("system",)))
    messages = [LONG_SYSTEM, UserMessage(content="hello")]
    async with serve() as sim:
        model = make_model("anthropic", sim, pricing=PRICING)
        first = await model.complete(messages, options)
        second = await model.complete(messages, options)
        body = sim.requests[-1].body
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert first.usage.cache_write_tokens > 0 and first.usage.cached_tokens == 0
    assert second.usage.cached_tokens == first.usage.cache_write_tokens
    assert not second.usage.input_includes_cache
    assert first.usage.cost is not None and second.usage.cost is not None
    assert first.usage.cost.cache_write == pytest.approx(
        first.usage.cache_write_tokens * 3.75 / 1e6
    )
    assert second.usage.cost.cached_input == pytest.approx(second.usage.cached_tokens * 0.3 / 1e6)
    assert second.usage.cost.total < first.usage.cost.total


async def test_openai_long_prompt_is_cached_on_repeat() -> None:
    messages = [LONG_SYSTEM, UserMessage(content="hello")]
    async with serve() as sim:
        model = make_model("openai", sim, pricing=PRICING)
        first = await model.complete(messages)
        second = await model.complete(messages)
    assert first.usage.cached_tokens == 0
    assert 0 < second.usage.cached_tokens <= second.usage.input_tokens
    assert second.usage.input_includes_cache
    assert second.usage.cost is not None
    assert second.usage.cost.input == pytest.approx(
        (second.usage.input_tokens - second.usage.cached_tokens) * 3.0 / 1e6
    )


async def test_openai_reasoning_tokens_are_a_cost_channel() -> None:
    script = [Rule(reply=Reply(thinking="step by step " * 30, text="42"))]
    async with serve(script) as sim:
        reply = await make_model("openai", sim, pricing=PRICING).complete(
            [UserMessage(content="think")]
        )
    usage = reply.usage
    assert usage.reasoning_tokens > 0 and usage.output_tokens > usage.reasoning_tokens
    assert usage.cost is not None
    assert usage.cost.reasoning == pytest.approx(usage.reasoning_tokens * 15.0 / 1e6)
    assert usage.cost.output == pytest.approx(
        (usage.output_tokens - usage.reasoning_tokens) * 15.0 / 1e6
    )


@pytest.mark.parametrize("streamed", [False, True])
async def test_anthropic_thinking_blocks_replay_verbatim(streamed: bool) -> None:
    script = [
        Rule(reply=Reply(thinking="Add the numbers.", redacted_thinking="EmwKAhgB", text="4"))
    ]
    options = ModelOptions(reasoning=ReasoningOptions(max_tokens=2048), max_tokens=4096)
    async with serve(script) as sim:
        model = make_model("anthropic", sim)
        model.capabilities = model.capabilities.model_copy(update={"reasoning": True})
        question = [UserMessage(content="2+2?")]
        if streamed:
            chunks = [c async for c in model.stream(question, options)]
            reply = chunks[-1].response
            assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "4"
        else:
            reply = await model.complete(question, options)
        kinds = [b.kind for b in reply.blocks]
        assert kinds == ["thinking", "redacted_thinking"]
        thinking = reply.blocks[0].data
        assert thinking["thinking"] == "Add the numbers." and thinking["signature"]
        history = [*question, reply.message, UserMessage(content="and 3+3?")]
        await model.complete(history, options)
        sent = sim.requests[-1].body
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    replayed = sent["messages"][1]["content"]
    assert replayed[:2] == [b.data for b in reply.blocks]


async def test_openai_drops_other_providers_blocks_on_replay() -> None:
    script = [Rule(reply=Reply(thinking="hmm", text="4"))]
    async with serve(script) as sim:
        claude = make_model("anthropic", sim)
        reply = await claude.complete([UserMessage(content="2+2?")])
        history = [UserMessage(content="2+2?"), reply.message, UserMessage(content="again")]
        assert isinstance(history[1], AssistantMessage) and history[1].content
        await make_model("openai", sim).complete(history)
        sent = sim.requests[-1].body
    assert sent["messages"][1] == {"role": "assistant", "content": "4"}


async def test_anthropic_counts_tokens_without_generating() -> None:
    messages = [LONG_SYSTEM, UserMessage(content="hello")]
    async with serve() as sim:
        model = make_model("anthropic", sim)
        counted = await model.count_tokens(messages)  # type: ignore[attr-defined]
        reply = await model.complete(messages)
        stats = sim.stats()
    assert counted == reply.usage.total_input_tokens
    assert stats.by_api == {"anthropic": 2}

"""Anthropic's advisor tool (issue #44, point 8): a second model that runs inside a
request and is reported in `usage.iterations` (`advisor_message`), not in the top-level
usage. Its tokens are counted and priced at its own model's rates (genai-prices),
streamed and not, online and in provider batches, on both backends; the simulator
sends the shape the official SDK's types read."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from agent_support import KEY
from anthropic.types.beta import BetaMessage
from anthropic.types.beta.beta_message_delta_usage import BetaMessageDeltaUsage
from genai_prices import Usage as PriceUsage
from genai_prices import calc_price

import raygent
from raygent import Usage
from raygent._batch.cli import cost_line
from raygent.sim import Reply, Rule, ServerToolReply, Simulator, serve

EXECUTOR, ADVISOR = "claude-haiku-4-5", "claude-opus-4-6"
ADVISOR_TOOL = {"type": "advisor_20260301", "name": "advisor", "model": ADVISOR}
ADVICE = "Check the inputs first; then answer in one short sentence, citing the source."
SCRIPT = [
    Rule(
        reply=Reply(
            server_tools=[
                ServerToolReply(
                    "advisor",
                    result={"type": "advisor_result", "text": ADVICE, "stop_reason": "end_turn"},
                )
            ],
            text="The answer, as advised.",
        )
    )
]
QUICK = raygent.ProviderBatch(gather_seconds=0.1, poll_seconds=0.02)


def _agent(sim: Simulator) -> raygent.Agent:
    model = raygent.AnthropicModel(
        EXECUTOR,
        base_url=sim.anthropic_base_url,
        api_key=KEY,
        headers={"anthropic-beta": "advisor-tool-2026-03-01"},
    )
    tools = {"provider_options": {"anthropic": {"tools": [ADVISOR_TOOL]}}}
    return raygent.agent(model=model, model_options=tools)


def _listed(model: str, usage: Usage) -> float:
    """What genai-prices says `usage`'s tokens cost at `model`'s rates."""
    price = calc_price(
        PriceUsage(
            input_tokens=usage.total_input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cached_tokens,
            cache_write_tokens=usage.cache_write_tokens,
        ),
        model,
        provider_id="anthropic",
    )
    return float(price.total_price)


def _own(usage: Usage) -> Usage:
    """The executor's part of a usage: the top-level fields Anthropic reports."""
    other = (usage.other_models or {})[ADVISOR]
    return Usage(
        input_tokens=usage.input_tokens - other.input_tokens,
        output_tokens=usage.output_tokens - other.output_tokens,
        input_includes_cache=False,
    )


def _check_priced(usage: Usage) -> None:
    assert usage.other_models is not None and list(usage.other_models) == [ADVISOR]
    advisor = usage.other_models[ADVISOR]
    executor = _own(usage)
    # The advisor read what the executor read, and wrote the advice.
    assert advisor.input_tokens == executor.input_tokens > 0
    assert advisor.output_tokens > 0 and advisor.requests == 0
    assert usage.requests == 1
    assert advisor.cost is not None and usage.cost is not None
    assert advisor.cost.total == pytest.approx(_listed(ADVISOR, advisor))
    expected = _listed(EXECUTOR, executor) + _listed(ADVISOR, advisor)
    assert usage.cost.total == pytest.approx(expected)
    # Priced at the advisor's rates, not the executor's (Opus costs more than Haiku).
    assert advisor.cost.total > _listed(EXECUTOR, advisor)


async def test_the_advisor_s_tokens_are_counted_and_priced_at_its_own_rates() -> None:
    async with serve(SCRIPT) as sim:
        bot = _agent(sim)
        result = await bot.execute("What should I do?")
        stream = bot.stream("What should I do?")
        async for _ in stream:
            pass
        streamed = await stream.result
        sent = sim.requests
    assert result.ok and streamed.ok, (result.error, streamed.error)
    assert all(r.body["tools"] == [ADVISOR_TOOL] for r in sent)
    _check_priced(result.usage)
    # Streamed, the same usage: the iterations come in the last message_delta.
    assert streamed.usage == result.usage
    [trip] = result.report.trips
    assert trip.usage == result.usage
    # The report keeps the advisor's line through JSON (sinks, stores, observers).
    again = Usage.model_validate_json(result.usage.model_dump_json())
    assert again == result.usage
    # The CLI's summary shows the advisor's line under the job's cost.
    line = cost_line(result.usage)
    assert f"of which {ADVISOR}, run inside the requests (an advisor)" in line


async def test_a_provider_batch_prices_the_advisor_at_batch_rates() -> None:
    async with serve(SCRIPT) as sim:
        bot = _agent(sim)
        online = await bot.execute("What should I do?")
        job = await raygent.batch(
            bot, ["What should I do?"] * 3, provider_batch=QUICK, progress=False
        )
    assert online.ok and job.ok, job.report.errors
    assert job.report.provider_batch is not None and job.report.provider_batch.lines == 3
    usage = job.usage
    assert usage.other_models is not None
    advisor, one = usage.other_models[ADVISOR], online.usage.other_models[ADVISOR]  # type: ignore[index]
    assert (advisor.input_tokens, advisor.output_tokens) == (
        3 * one.input_tokens,
        3 * one.output_tokens,
    )
    assert usage.total_tokens == 3 * online.usage.total_tokens
    # Anthropic's Message Batches charge half, the advisor's tokens too.
    assert usage.cost is not None and online.usage.cost is not None
    assert usage.cost.total == pytest.approx(3 * online.usage.cost.total / 2)
    assert advisor.cost is not None and one.cost is not None
    assert advisor.cost.total == pytest.approx(3 * one.cost.total / 2)


async def test_a_cached_reply_with_an_advisor_costs_nothing() -> None:
    cache = raygent.ResponseCache()
    async with serve(SCRIPT) as sim:
        bot = _agent(sim)
        paid = await bot.execute("What should I do?", cache=cache)
        hit = await bot.execute("What should I do?", cache=cache)
    assert hit.report.trips[0].cache == "hit"
    assert hit.usage.total_tokens == paid.usage.total_tokens
    assert hit.usage.cost is not None and hit.usage.cost.total == 0
    assert hit.usage.other_models is not None
    assert hit.usage.other_models[ADVISOR].cost is not None
    assert hit.usage.other_models[ADVISOR].cost.total == 0


@pytest.mark.local_only("the simulator's wire itself, read by the official SDK's types")
async def test_the_simulator_sends_the_advisor_as_the_sdk_reads_it() -> None:
    body: dict[str, Any] = {
        "model": EXECUTOR,
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "What should I do?"}],
        "tools": [ADVISOR_TOOL],
    }
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    async with serve(SCRIPT) as sim, httpx.AsyncClient() as client:
        url = f"{sim.anthropic_base_url}/v1/messages"
        whole = (await client.post(url, json=body, headers=headers)).json()
        streamed = await client.post(url, json={**body, "stream": True}, headers=headers)
    message = BetaMessage.model_validate(whole)
    assert [b.type for b in message.content] == ["server_tool_use", "advisor_tool_result", "text"]
    assert message.content[1].content.text == ADVICE  # type: ignore[union-attr]
    assert message.usage.iterations is not None
    kinds = [(i.type, getattr(i, "model", None)) for i in message.usage.iterations]
    assert kinds == [("message", None), ("advisor_message", ADVISOR)]
    # The top-level usage is the executor's own: its `message` iteration's.
    assert message.usage.input_tokens == message.usage.iterations[0].input_tokens
    assert message.usage.output_tokens == message.usage.iterations[0].output_tokens
    deltas = [
        json.loads(line.removeprefix("data: "))
        for line in streamed.text.splitlines()
        if line.startswith("data: ") and '"message_delta"' in line
    ]
    [delta] = deltas
    usage = BetaMessageDeltaUsage.model_validate(delta["usage"])
    assert usage.iterations == message.usage.iterations

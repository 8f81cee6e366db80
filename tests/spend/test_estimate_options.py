"""The estimate with the job's options (issue #37, point 7; issue #36, point 4): priced at
the batch rate for `provider_batch`, a cache's replies free in the sample and in the
projection, a workflow's agents counted, the sample's answers reused by the job instead
of paid again (`reuse=`), `estimate_sync`; money under a cent printed with its digits."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from spend_support import MAX_TOKENS, priced_model, uniform_rules

import raygent
from raygent import ResponseCache
from raygent.sim import serve
from raygent.usage import dollars

JOB = 16


def _items(count: int = JOB) -> list[dict[str, str]]:
    return [{"input": f"question {i:03d}", "key": f"k{i:03d}"} for i in range(count)]


async def test_the_estimate_prices_a_provider_batch_job_at_the_batch_rate() -> None:
    with serve(uniform_rules()) as sim:
        agent = raygent.agent(model=priced_model(sim), model_options={"max_tokens": MAX_TOKENS})
        online = await raygent.estimate(agent, _items(), sample=JOB, seed=1)
        by_batch = await raygent.estimate(agent, _items(), sample=JOB, seed=1, provider_batch=True)
        lines = raygent.ProviderBatch(gather_seconds=0.1, poll_seconds=0.02)
        job = await raygent.batch(agent, _items(), provider_batch=lines, progress=False)
    assert job.ok and job.usage.cost is not None
    assert online.cost_usd is not None and by_batch.cost_usd is not None
    # A sample of the whole job is exact: the estimate is what the batch job cost.
    assert by_batch.cost_usd == pytest.approx(job.usage.cost.total)
    assert by_batch.cost_usd == pytest.approx(online.cost_usd / 2)
    assert by_batch.provider_batch and "at batch rates" in str(by_batch)
    assert "within 24 h" in str(by_batch)


async def test_the_estimate_counts_a_caches_replies_as_free() -> None:
    with serve(uniform_rules()) as sim:
        agent = raygent.agent(model=priced_model(sim), model_options={"max_tokens": MAX_TOKENS})
        cache = ResponseCache()
        plain = await raygent.estimate(agent, _items(), sample=JOB, seed=2)
        # Half the job ran before with the cache: its replies are kept.
        await raygent.batch(agent, _items()[: JOB // 2], cache=cache, progress=False)
        sent = sim.stats().requests
        guess = await raygent.estimate(agent, _items(), sample=JOB, seed=2, cache=cache)
        assert sim.stats().requests - sent == JOB // 2  # the sample paid the other half only
    assert plain.cost_usd is not None and guess.cost_usd is not None
    assert guess.cost_usd == pytest.approx(plain.cost_usd / 2)
    assert guess.requests == JOB // 2 and guess.cache_hits == JOB // 2
    assert f"{JOB // 2} trips from the cache" in str(guess)


async def test_a_workflows_estimate_counts_every_agent_of_it() -> None:
    with serve(uniform_rules()) as sim:
        model = priced_model(sim)
        bot = raygent.agent(model=model, model_options={"max_tokens": MAX_TOKENS})
        flow = raygent.workflow(
            name="twice",
            steps=[
                raygent.step("first", agent=bot),
                raygent.step("again", agent=bot, input=lambda state: state.input),
            ],
        )
        single = await raygent.estimate(bot, _items(), sample=JOB, seed=3)
        guess = await raygent.estimate(flow, _items(), sample=JOB, seed=3)
    assert single.cost_usd is not None and guess.cost_usd is not None
    assert guess.requests == 2 * JOB
    assert guess.cost_usd == pytest.approx(2 * single.cost_usd)


async def test_a_job_reuses_its_estimates_answers_instead_of_paying_again(
    backend_kind: str, tmp_path: Path
) -> None:
    with serve(uniform_rules()) as sim:
        agent = raygent.agent(model=priced_model(sim), model_options={"max_tokens": MAX_TOKENS})
        items = [f"question {i}" for i in range(JOB)]  # keyed by position
        guess = await raygent.estimate(agent, items, sample=5, seed=4)
        assert len(guess.answers) == 5
        seen: list[int] = []
        result = await raygent.batch(
            agent, items, reuse=guess, sink=tmp_path / "out.jsonl", progress=False,
            on_item=lambda item: seen.append(item.key),
        )  # fmt: skip
        # The job sent what the sample had not answered: one request an item in all.
        assert sim.stats().requests == JOB
    assert result.ok and result.report.succeeded == JOB
    assert sorted(seen) == list(range(JOB))  # on_item saw every item once, reused or run
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted(r["key"] for r in records) == list(range(JOB))
    assert all(r["status"] == "completed" and r["data"] for r in records)
    assert result.usage.requests == JOB  # the reused answers' usage is the job's


def test_estimate_sync_runs_from_synchronous_code() -> None:
    with serve(uniform_rules()) as sim:
        agent = raygent.agent(model=priced_model(sim), model_options={"max_tokens": MAX_TOKENS})
        guess = raygent.estimate_sync(agent, _items(), sample=4, seed=5)
        assert sim.stats().requests == 4
    assert guess.items == JOB and guess.sample == 4 and guess.cost_usd


def test_money_under_a_cent_keeps_its_digits() -> None:
    assert dollars(0.0042) == "$0.0042"
    assert dollars(0.015) == "$0.015"
    assert dollars(0.42) == "$0.42"
    assert dollars(1234.5) == "$1,234.50"
    assert dollars(0.0) == "$0.00" and dollars(-1e-15) == "$0.00"
    guess = raygent.Estimate(
        items=10, sample=2, cost_usd=0.0042, cost_usd_low=0.0031, cost_usd_high=0.0053,
        tokens=1, requests=1, seconds=1.0,
    )  # fmt: skip
    assert "~$0.0042 ($0.0031 to $0.0053)" in str(guess)
    assert not re.search(r"\$0\.0[01]\b", str(guess))

"""A budget under provider batches (issue #36, point 2), on both backends: each line
reserves its worst case at the batch rates before it joins a batch and settles at its
real usage; a line that does not fit ends BUDGET_EXCEEDED as online; a line that expired
or failed releases its reservation."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from pb_support import QUICK, model_for, online_requests
from shared_support import driver_env

import raygent
from raygent import Budget, ProviderBatch
from raygent.sim import Reply, Rule, serve

ANSWER = "a" * 80  # 20 output tokens, whatever the question
MAX_TOKENS = 40  # a worst case near the real cost: a budget binds on the items' count
ITEMS = 30
ROOT = Path(__file__).resolve().parents[2]


def _items(count: int) -> list[dict[str, Any]]:
    return [{"input": f"question number {i:05d}", "key": i} for i in range(count)]


def _agent(sim: Any) -> raygent.Agent:
    return raygent.agent(model=model_for("chat", sim), model_options={"max_tokens": MAX_TOKENS})


async def test_a_budget_of_a_third_of_the_jobs_batch_cost_stops_items_and_holds(
    backend_kind: str,
) -> None:
    async with serve([Rule(reply=Reply(text=ANSWER))]) as sim:
        bot = _agent(sim)
        # Every item is the same size: the job's batch cost is its items' online cost
        # at half the rates (the model declares no batch rates).
        probe = await bot.execute(_items(1)[0]["input"])
        assert probe.usage.cost is not None and probe.usage.cost.total > 0
        budget = Budget(usd=ITEMS * probe.usage.cost.total / 2 / 3)
        lines_before = sim.stats().batch_lines
        result = await raygent.batch(
            bot, _items(ITEMS), provider_batch=QUICK, budget=budget, progress=False
        )
        stats = sim.stats()
    report = result.report
    assert sorted(item.key for item in result.items) == list(range(ITEMS))  # each once
    assert report.succeeded > 0 and report.failed > 0, report.errors
    assert report.errors == {"BUDGET_EXCEEDED": report.failed}
    assert online_requests(stats) == 1  # the probe: what the job ran, ran by batch
    # Only the items that fitted were sent as lines; what they cost stays in the budget
    # (nothing is in flight once the job is over).
    assert stats.batch_lines - lines_before == report.succeeded
    assert result.usage.cost is not None
    assert result.usage.cost.total <= budget.usd + 1e-12  # type: ignore[operator]
    shown = report.budget
    assert shown is not None and shown.spent.usd == pytest.approx(result.usage.cost.total)
    assert shown.reserved.usd == pytest.approx(0.0, abs=1e-12)
    # Each line is priced at the batch rate, as the report says.
    assert report.provider_batch is not None
    assert report.provider_batch.cost == pytest.approx(result.usage.cost.total)


async def test_a_line_reserves_its_worst_case_at_the_batch_rate(backend_kind: str) -> None:
    async with serve([Rule(reply=Reply(text=ANSWER))]) as sim:
        bot = _agent(sim)
        # The worst case of one request online, as a refused reservation says it.
        refused = await bot.execute(_items(1)[0]["input"], budget=Budget(usd=1e-12))
        assert refused.error is not None and refused.error.code == "BUDGET_EXCEEDED"
        online_worst = refused.error.details["needed"]
        # Between the batch rate's worst case (half) and the online one: only a line
        # reserved at the batch rate fits.
        budget = Budget(usd=0.75 * online_worst)
        result = await raygent.batch(
            bot, _items(3), provider_batch=QUICK, budget=budget, progress=False
        )
        stats = sim.stats()
    assert result.report.succeeded >= 1, result.report.errors
    assert online_requests(stats) == 0  # (the probe was refused: never sent)
    assert result.usage.cost is not None
    assert result.usage.cost.total <= budget.usd  # type: ignore[operator]


@pytest.mark.parametrize("mode", ["fail", "online"])
async def test_lines_not_answered_release_their_reservation(backend_kind: str, mode: str) -> None:
    options = ProviderBatch(gather_seconds=0.5, poll_seconds=0.05, on_expired=mode)
    budget = Budget(usd=1.0)  # large: it binds nothing, it counts
    async with serve([Rule(reply=Reply(text=ANSWER))], batch_expire_after=4) as sim:
        bot = _agent(sim)
        result = await raygent.batch(
            bot, _items(10), provider_batch=options, budget=budget, progress=False
        )
        stats = sim.stats()
    shown = result.report.budget
    assert shown is not None and result.usage.cost is not None
    # What was spent is what the answered lines (and, under "online", the requests sent
    # online) cost: an expired line was never billed, so it charges nothing.
    assert shown.spent.usd == pytest.approx(result.usage.cost.total)
    assert shown.reserved.usd == pytest.approx(0.0, abs=1e-12)
    if mode == "fail":
        assert [i.status for i in result.items].count("completed") == 4
        assert shown.spent.requests == 4
    else:
        assert all(i.status == "completed" for i in result.items)
        assert online_requests(stats) == 6 and shown.spent.requests == 10


@pytest.mark.local_only("the command runs in a process of its own, on the local backend")
async def test_the_cli_holds_a_budget_under_provider_batches(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(i) + "\n" for i in _items(5)))
    sink = tmp_path / "out.jsonl"
    async with serve([Rule(reply=Reply(text=ANSWER))]) as sim:
        env = {**driver_env("local"), "RAYGENT_TEST_SIM_URL": sim.openai_base_url}
        command = [
            sys.executable,
            "-m",
            "raygent",
            "batch",
            "tests.provider_batch.pb_cli_agent:bot",
        ]
        options = ["--provider-batch", "--gather-seconds", "0.1", "--poll-seconds", "0.02"]
        done = await asyncio.create_subprocess_exec(
            *command, str(source), "-o", str(sink), *options, "--budget-usd", "0.002",
            "--no-progress", env=env, cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        said, _ = await asyncio.wait_for(done.communicate(), 120)
        stats = sim.stats()
    text = said.decode()
    # The agent sets no max_tokens: a line's worst case (4,096 tokens out at the batch
    # rate, $0.0041) does not fit $0.002: nothing is sent, every item says why.
    assert stats.batch_lines == 0 and online_requests(stats) == 0, text
    rows = [json.loads(line) for line in sink.read_text().splitlines()]
    assert sorted(r["key"] for r in rows) == list(range(5))
    assert all(r["error"]["code"] == "BUDGET_EXCEEDED" for r in rows), rows[0]
    assert "budget: $0.00 spent" in text, text

"""`raygent.estimate` (issue #30): on a job of items of uniformly random sizes, the
estimate from 50 items is within 10% of the real cost and its interval contains it; and
the `raygent batch` flags: --estimate, --confirm-over, --budget-usd."""

from __future__ import annotations

import io
import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from spend_support import MAX_TOKENS, priced_model, uniform_rules

import raygent
from raygent._batch.cli import DECLINED
from raygent.cli import main
from raygent.sim import Simulator, serve

JOB = 400


def _items(count: int, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    return [f"q{i} " + "w" * rng.randint(20, 400) for i in range(count)]


async def test_an_estimate_from_50_items_is_within_10_percent_and_its_interval_holds() -> None:
    with serve(uniform_rules()) as sim:
        agent = raygent.agent(model=priced_model(sim), model_options={"max_tokens": MAX_TOKENS})
        items = _items(JOB)
        guess = await raygent.estimate(agent, items, sample=50, seed=11)
        assert sim.stats().requests == 50  # the sample ran, for real
        job = await raygent.batch(agent, items, concurrency=16, progress=False)
    assert job.usage.cost is not None
    real = job.usage.cost.total
    assert guess.items == JOB and guess.sample == 50
    assert guess.cost_usd is not None and guess.cost_usd_low is not None
    assert guess.cost_usd_high is not None
    assert abs(guess.cost_usd - real) <= 0.10 * real
    assert guess.cost_usd_low <= real <= guess.cost_usd_high
    assert guess.cost_usd_low < guess.cost_usd < guess.cost_usd_high  # items differ
    assert guess.requests == JOB  # one request an item
    assert abs(guess.tokens - job.usage.total_tokens) <= 0.10 * job.usage.total_tokens
    assert guess.seconds > 0
    assert "400 items: ~$" in str(guess)


async def test_a_sample_of_the_whole_job_is_exact() -> None:
    with serve(uniform_rules()) as sim:
        agent = raygent.agent(model=priced_model(sim), model_options={"max_tokens": MAX_TOKENS})
        guess = await raygent.estimate(agent, _items(20), sample=50, seed=1)
        job = await raygent.batch(agent, _items(20), progress=False)
    assert guess.sample == 20 and job.usage.cost is not None
    assert guess.cost_usd == pytest.approx(job.usage.cost.total)
    assert guess.cost_usd_low == guess.cost_usd == guess.cost_usd_high


def _cli(tmp_path: Path, *flags: str) -> tuple[int, Path]:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"input": q}) + "\n" for q in _items(30)))
    sink = tmp_path / "out.jsonl"
    args = ["batch", "spend_support:cli_agent", str(source), "-o", str(sink)]
    return main([*args, "--backend", "local", "--no-progress", *flags]), sink


@pytest.fixture
def cli_sim(monkeypatch: pytest.MonkeyPatch) -> Iterator[Simulator]:
    with serve(uniform_rules()) as sim:
        monkeypatch.setenv("SPEND_SIM_URL", sim.openai_base_url)
        yield sim


def test_the_cli_prints_an_estimate_and_runs_nothing_else(
    cli_sim: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, sink = _cli(tmp_path, "--estimate", "--sample", "10")
    err = capsys.readouterr().err
    assert code == 0, err
    assert "estimate: 30 items: ~$" in err and "from a sample of 10" in err
    assert not sink.exists()


def test_the_cli_asks_before_a_job_estimated_over_confirm_over(
    cli_sim: object,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    code, sink = _cli(tmp_path, "--confirm-over", "0.01", "--sample", "5")
    err = capsys.readouterr().err
    assert code == DECLINED and "run it? [y/N]" in err and not sink.exists()
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    code, sink = _cli(tmp_path, "--confirm-over", "0.01", "--sample", "5")
    assert code == 0 and len(sink.read_text().splitlines()) == 30
    capsys.readouterr()
    # Under the threshold it runs without asking (a new job on the same sink, said so).
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code, _ = _cli(tmp_path, "--confirm-over", "1000", "--sample", "5", "--mode", "overwrite")
    assert code == 0 and "run it?" not in capsys.readouterr().err


def test_the_cli_holds_a_budget_and_reports_it(
    cli_sim: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = _cli(tmp_path, "--budget-usd", "1.0", "--concurrency", "2")
    err = capsys.readouterr().err
    assert code == 1, err
    assert "BUDGET_EXCEEDED x" in err and "budget: $" in err and "spent" in err

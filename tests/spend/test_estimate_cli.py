"""`raygent batch --estimate / --confirm-over / --budget-usd` as a user runs them, in a
process of its own (issue #37, point 7): the estimate needs no `-o`, honours
`--provider-batch` and `--cache`, a confirmed job does not pay again for its sample's
answers, and money under a cent prints with its digits."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from spend_support import uniform_rules

from raygent.sim import Simulator, serve

ROOT = Path(__file__).resolve().parents[2]
ITEMS, SAMPLE = 30, 10
SUB_CENT = re.compile(r"\$0\.00[0-9]*[1-9]")  # e.g. $0.0042: under a cent, digits kept


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with serve(uniform_rules()) as running:
        yield running


def _source(tmp_path: Path) -> Path:
    source = tmp_path / "in.jsonl"
    rows = (json.dumps({"input": f"question {i:03d}"}) for i in range(ITEMS))
    source.write_text("".join(row + "\n" for row in rows))
    return source


def _cli(
    sim: Simulator, tmp_path: Path, *flags: str, agent: str = "cheap_cli_agent", stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    env["SPEND_SIM_URL"] = sim.openai_base_url
    target = f"tests.spend.spend_support:{agent}"
    command = [sys.executable, "-m", "raygent", "batch", target, str(_source(tmp_path))]
    return subprocess.run(
        [*command, "--backend", "local", "--no-progress", *flags],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_estimate_needs_no_output_and_prints_cents_with_their_digits(
    sim: Simulator, tmp_path: Path
) -> None:
    done = _cli(sim, tmp_path, "--estimate", "--sample", str(SAMPLE))
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stderr.splitlines() if x.startswith("estimate:"))
    assert f"{ITEMS} items: ~$0.00" in line and "from a sample of 10" in line
    # Each amount (the point, its interval) under a cent keeps its significant digits.
    assert len(SUB_CENT.findall(line)) == 3, line
    assert sim.stats().requests == SAMPLE
    # Running a job still needs somewhere to write it.
    missing = _cli(sim, tmp_path)
    assert missing.returncode == 2 and "-o/--output is needed" in missing.stderr


def test_the_estimate_honours_provider_batch_and_a_cache(sim: Simulator, tmp_path: Path) -> None:
    def cost(done: subprocess.CompletedProcess[str]) -> float:
        assert done.returncode == 0, done.stderr
        found = re.search(r"estimate: \d+ items: ~\$([0-9.]+)", done.stderr)
        assert found, done.stderr
        return float(found.group(1))

    sample = ("--estimate", "--sample", str(ITEMS))
    online = cost(_cli(sim, tmp_path, *sample, agent="cli_agent"))
    batched = _cli(sim, tmp_path, *sample, "--provider-batch", agent="cli_agent")
    assert cost(batched) == pytest.approx(online / 2, rel=0.01)
    assert "at batch rates" in batched.stderr
    # A job run once with a cache: its estimate with the cache costs nothing, sends nothing.
    cache = str(tmp_path / "cache.db")
    out = str(tmp_path / "out.jsonl")
    ran = _cli(sim, tmp_path, "-o", out, "--cache", cache, agent="cli_agent")
    assert ran.returncode == 0, ran.stderr
    sent = sim.stats().requests
    cached = _cli(sim, tmp_path, *sample, "--cache", cache, agent="cli_agent")
    assert cost(cached) == 0.0 and sim.stats().requests == sent
    assert f"{ITEMS} trips from the cache" in cached.stderr


def test_a_confirmed_job_reuses_its_samples_answers(sim: Simulator, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    flags = ("-o", str(out), "--confirm-over", "0.001", "--sample", str(SAMPLE))
    done = _cli(sim, tmp_path, *flags, stdin="y\n")
    assert done.returncode == 0, done.stderr
    assert "may cost over $0.0010; run it?" in done.stderr
    # One request an item: the sample's 10 are not sent again, their answers are kept.
    assert sim.stats().requests == ITEMS
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["key"] for r in records) == list(range(ITEMS))
    assert all(r["status"] == "completed" and r["data"] for r in records)
    assert f"{ITEMS} items: {ITEMS} completed" in done.stderr


def test_a_budget_under_a_cent_prints_with_its_digits(sim: Simulator, tmp_path: Path) -> None:
    out = str(tmp_path / "out.jsonl")
    done = _cli(sim, tmp_path, "-o", out, "--budget-usd", "0.00025", "--concurrency", "2")
    assert done.returncode == 1, done.stderr
    line = next(x for x in done.stderr.splitlines() if x.startswith("budget:"))
    assert "of $0.00025" in line and len(SUB_CENT.findall(line)) >= 2, line

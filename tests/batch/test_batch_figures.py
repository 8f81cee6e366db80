"""A batch's one-line summary and figures tell what really happened (issue 44.3, 44.4),
on both backends: failed tool calls show in the repr, the bar, the notebook view and
`clean`; a job that sent nothing costs 0.0; every 429 of every attempt is counted; rate
figures appear only once a limit held the job back, as wall-clock time; start-up (Ray's)
is reported apart from the job's own time; no empty tier key."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from backend_support import BACKENDS, NAMESPACE, on_backend
from batch_support import broken_tool_agent, fast_retry

import raygent
import raygent.seams.registry
from raygent import RateLimit, Usage
from raygent._batch.progress import Progress
from raygent._batch.report import WallClock
from raygent.seams.contract import Backend
from raygent.seams.local import LOCAL
from raygent.sim import Fault, Reply, Rule, serve


@pytest.fixture(params=BACKENDS)
def backend_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from on_backend(request)


def bar_lines(err: str) -> list[str]:
    return [line for line in err.replace("\r", "\n").splitlines() if line.startswith("batch:")]


async def test_a_job_whose_every_tool_call_failed_says_so_everywhere(
    backend_kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = await raygent.batch(broken_tool_agent, ["q0", "q1", "q2"], progress=True)
    report = result.report
    assert report.succeeded == 3 and report.failed == 0  # the model went on
    assert (report.tool_errors, report.items_with_tool_errors) == (3, 3)
    assert result.ok and not result.clean  # completed, not clean
    said = "tool errors: 3 failed tool calls in 3 items"
    assert said in repr(result) and said in repr(report)
    assert "3 with tool errors" in result._repr_html_()  # the notebook view's counts
    last = bar_lines(capsys.readouterr().err)[-1]  # the bar as it closed
    assert "failed=0" in last and "tool errors=3 (3 items)" in last, last


async def test_a_clean_job_is_clean(backend_kind: str) -> None:
    async def double(n: int) -> int:
        return 2 * n

    result = await raygent.batch(double, range(3), progress=False)
    assert result.ok and result.clean
    assert "tool errors" not in repr(result)


async def test_a_job_that_sent_nothing_costs_zero_and_formats(backend_kind: str) -> None:
    # An agent's items that are no input an agent runs on: each fails unread, unsent.
    result = await raygent.batch(broken_tool_agent, [1, 2], progress=False)
    assert result.report.failed == 2 and result.usage.requests == 0
    assert raygent.total_cost(result.usage) == 0.0
    assert f"{raygent.total_cost(result.usage):.2f}" == "0.00"
    assert "$0.00" in repr(result)


def test_only_a_cost_really_unknown_is_none() -> None:
    assert raygent.total_cost(Usage()) == 0.0
    assert raygent.total_cost(Usage(requests=1, input_tokens=10)) is None  # unpriced model
    assert raygent.total_cost(None) is None


async def test_every_429_of_every_attempt_is_counted(backend_kind: str) -> None:
    # Two 429s in all. Locally a 429 fails its trip, and the item's next attempt
    # answers (the item's last attempt met none); on Ray the gateway's send retries
    # within the trip. Either way the report counts both, as the provider answered.
    script = [Rule(reply=Reply(fault=Fault(kind="status", status=429, retry_after=0)), times=2)]
    async with serve(script) as sim:
        model = raygent.OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-sim")
        bot = raygent.agent(model=model)
        result = await raygent.batch(
            bot, [f"q{n}" for n in range(4)], concurrency=1, retry=fast_retry(), progress=False
        )
        stats = sim.stats()
    assert result.report.succeeded == 4, result.report.errors
    assert stats.by_status.get(429) == 2
    assert result.report.throttled == 2
    # The refused trips named no service tier: no "" key for them.
    assert result.report.tiers == {"default": 4}


async def test_no_rate_figures_where_no_limit_held_the_job_back(
    backend_kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async with serve() as sim:
        model = raygent.OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-sim")
        result = await raygent.batch(raygent.agent(model=model), [f"q{n}" for n in range(12)])
    assert result.report.succeeded == 12
    assert result.report.rate_wait == 0.0 and result.report.throttled == 0
    assert all(t.rate_wait == 0 for i in result.items for t in i.result.report.trips)
    err = capsys.readouterr().err
    assert "req/min" not in err and "rate wait" not in err


async def test_rate_wait_is_wall_clock_time_not_a_sum_over_items(backend_kind: str) -> None:
    # 24 requests at once under 600 a minute: a second's share goes, the others wait in
    # line, together. Their waits add up to far more than the time anyone waited.
    async with serve() as sim:
        model = raygent.OpenAIModel(
            "sim-gpt",
            base_url=sim.openai_base_url,
            api_key="sk-sim",
            rate_limit=RateLimit(requests_per_minute=600),
        )
        result = await raygent.batch(
            raygent.agent(model=model), [f"q{n}" for n in range(24)], concurrency=24
        )
    report = result.report
    assert report.succeeded == 24
    summed = sum(t.rate_wait for i in result.items for t in i.result.report.trips)
    assert 0 < report.rate_wait < summed
    assert report.rate_wait <= report.startup + report.duration  # within the job
    assert report.requests_per_minute > 0


@pytest.mark.parametrize("kind", BACKENDS)
async def test_start_up_is_reported_apart_from_the_job(
    kind: str, request: pytest.FixtureRequest
) -> None:
    async def started(n: int) -> float:
        return time.time()

    backend: Backend | None = None
    if kind == "ray":
        request.getfixturevalue("ray_session")
        from raygent.actors import RayOptions, ray_backend

        # Options of its own: runners of its own, started by this job (a first job's).
        backend = ray_backend(RayOptions(namespace=NAMESPACE, runner_num_cpus=0.05))
    previous = raygent.seams.registry.use_backend(backend or LOCAL)
    try:
        began = time.time()
        result = await raygent.batch(started, range(8), progress=False)
        ended = time.time()
    finally:
        raygent.seams.registry.use_backend(previous)
    report = result.report
    first = min(result.data)
    # Start-up: from the call to the first item's start (as the driver learns it, a
    # little late on Ray: the way back of the first result).
    assert report.startup == pytest.approx(first - began, abs=0.3)
    assert report.startup + report.duration == pytest.approx(ended - began, abs=0.3)
    assert report.throughput == pytest.approx(report.total / report.duration)


def test_the_bar_clock_starts_with_the_first_item(monkeypatch: pytest.MonkeyPatch) -> None:
    progress = Progress(True, 10)
    bar: Any = progress._bar
    bar.start_t = bar.last_print_t = time.time() - 100  # the bar went up 100 s ago (Ray)
    progress.began(1.0)  # the first item began a second ago
    progress.update(0, 0, 0)
    elapsed = bar.format_dict["elapsed"]
    progress.close(0, 0, 0)
    assert elapsed < 50  # a second or so, not the 100 s of start-up


def test_wall_clock_counts_overlapping_waits_once_in_bounded_memory() -> None:
    clock = WallClock()
    for start, seconds in [(0.0, 2.0), (1.0, 2.0), (10.0, 1.0), (2.5, 0.25), (20.0, 0.0)]:
        clock.add(start, seconds)
    assert clock.total() == pytest.approx(4.0)  # [0, 3] and [10, 11]
    many = WallClock()
    for n in range(20_000):  # disjoint: 20,000 spans of 0.5 s, one a second
        many.add(float(n), 0.5)
    assert many.total() == pytest.approx(10_000.0)
    assert len(many._spans) <= 2 * 4096  # the oldest folded into a sum
    many.add(0.0, 20_000.0)  # reaching back past what was folded: counted from there
    assert 10_000.0 < many.total() <= 20_000.0

"""Gemini and Bedrock under cluster-wide rate limits and budgets on Ray (issues #46,
#47.5): a `raygent.batch` job on batch runners, and this process beside it, share one
model's rate through the gateway against a simulator that enforces it as Google and AWS
do (429 `RESOURCE_EXHAUSTED` with a `RetryInfo`; `ThrottlingException`; neither sends
rate-limit headers); with nothing configured the rate is learnt from the throttling
replies alone; and a job's budget, priced from the wire's usage, holds across runners."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import ray
from driver_support import fresh_namespace, ray_backend_in
from wires_support import (
    MAX_TOKENS,
    THROTTLING,
    WIRES,
    answered,
    check_budget,
    per_request,
    questions,
    throttled,
    throttled_sends,
    uniform_rules,
    wire_model,
)

import raygent
from raygent import Budget, RateLimit
from raygent._batch import BatchItem, BatchResult
from raygent.actors import endpoint_digest, gateway_names
from raygent.actors.gateway.access import rate_key
from raygent.sim import Latency, SimRateLimits, serve

pytestmark = pytest.mark.usefixtures("ray_session")

RPM = 600  # 10 a second: each test sends a few seconds' worth
WINDOWED = SimRateLimits(requests_per_minute=RPM, window_seconds=1.0)  # 10 in any second
RUNNERS, CONCURRENCY = 2, 16
BATCHED, HERE = 40, 20  # items of the batch job (on the runners), runs in this process


async def rate_stats(model: Any, namespace: str) -> dict[str, Any]:
    """The gateway's ledger of the model's rate ({}: no gateway yet)."""
    try:
        gateway = ray.get_actor(gateway_names(1)[0], namespace=namespace)
    except ValueError:  # not made yet
        return {}
    found: dict[str, Any] = await gateway.stats.remote(endpoint_digest(rate_key(model)))
    return found


async def _job_and_runs_here(
    bot: raygent.Agent, batched: int, here: int
) -> tuple[BatchResult, list[raygent.AgentResult], float]:
    """A batch job on the runners and runs in this process at once; the seconds taken.
    The runners are warmed first (a batch of two: the runners and the gateway made, the
    leases held), so what is timed is the sending alone."""
    warm = await raygent.batch(bot, ["warm 0", "warm 1"], runners=RUNNERS, progress=False)
    assert warm.ok, warm.report.errors
    started = time.monotonic()
    job = raygent.batch(
        bot,
        questions(batched),
        concurrency=CONCURRENCY,
        runners=RUNNERS,
        progress=False,
    )
    mine = asyncio.gather(*(bot.execute(f"here {i}") for i in range(here)))
    result, runs = await asyncio.gather(job, mine)
    return result, list(runs), time.monotonic() - started


@pytest.mark.parametrize("wire", WIRES)
async def test_a_configured_rate_holds_across_runners_and_this_process(wire: str) -> None:
    namespace = fresh_namespace()
    async with serve(uniform_rules(), rate_limits=WINDOWED) as sim:
        model = wire_model(wire, sim, rate_limit=RateLimit(requests_per_minute=RPM))
        bot = raygent.agent(model=model, backend=ray_backend_in(namespace))
        warmed = 2
        result, mine, seconds = await _job_and_runs_here(bot, BATCHED, HERE)
        held = await rate_stats(model, namespace)
        stats = sim.stats()
    assert result.report.succeeded == BATCHED, result.report.errors
    assert [r.report.status for r in mine] == ["completed"] * HERE
    sent = BATCHED + HERE
    assert stats.admitted_requests == warmed + sent
    # Sent at the times granted: a window crowded now and then by a send delayed on its
    # way on a loaded machine (CI at load 5 saw 2 of 62), no more. Not held across the
    # three processes, each would send at the whole rate: some 40 of 62 throttled. (The
    # 1% target is measured over 400 requests: benchmarks/bench_rate_limits.py.)
    assert throttled(stats) <= 2, stats.rate_limited
    # Configured: held as it is, and never above; a throttle (one of the 2 above) cuts
    # it, and the answers after bring it back up a step at a time.
    if throttled(stats) == 0:
        assert held["requests_per_minute"] == RPM
    assert 0.7 * RPM <= held["requests_per_minute"] <= RPM, held
    # A sensible share of the limit: 60 requests at 10 a second take 6 s at best.
    rate = sent / seconds * 60
    assert rate >= 0.5 * RPM, (rate, seconds)


@pytest.mark.parametrize("wire", WIRES)
async def test_a_rate_nobody_configured_is_learnt_from_the_throttling_replies(
    wire: str,
) -> None:
    namespace = fresh_namespace()
    async with serve(uniform_rules(), rate_limits=SimRateLimits(requests_per_minute=RPM)) as sim:
        model = wire_model(wire, sim)  # no rate_limit: learnt
        bot = raygent.agent(model=model, backend=ray_backend_in(namespace))
        result, mine, seconds = await _job_and_runs_here(bot, BATCHED, HERE)
        held = await rate_stats(model, namespace)
        stats = sim.stats()
    assert result.report.succeeded == BATCHED, result.report.errors
    assert [r.report.status for r in mine] == ["completed"] * HERE
    sends = throttled_sends(result.items, mine)
    # The provider's own throttling error, each one on the report of the request it
    # answered (and sent again: every item succeeded).
    assert throttled(stats) == len(sends) > 0, stats.rate_limited
    assert {s["error"]["provider_code"] for s in sends} == {THROTTLING[wire]}
    assert answered(stats) == 2 + BATCHED + HERE
    if wire == "gemini":  # RetryInfo's delay read, and waited out
        assert all(s["retry_after"] == 1.0 == s["wait"] for s in sends), sends
    else:  # no wait named: the retry policy's backoff
        assert all(s["retry_after"] is None and s["wait"] > 0 for s in sends), sends
    # No storm: every holder pauses after a throttle (Bedrock's names no wait: a
    # second's share, as in-process), so most requests go once. (Without the pause on
    # Ray, a Bedrock job met more throttles than it sent requests: 68 for 62.)
    sent = 2 + BATCHED + HERE
    assert len(sends) < 0.8 * sent, (len(sends), sent)
    # And none goes again and again: a request throttled in one round is not throttled
    # in every one after (4 sends at most on a quiet machine; CI's loaded one saw 5).
    assert max(_sends_per_request(result.items, mine)) <= 6
    # Learnt at the gateway from the throttles alone: the endpoint's concurrency,
    # lowered from no bound at all to what the provider let through. (No rate: with no
    # limit stated, the gateway takes none from what it saw answered in a storm.)
    assert held["limit"] < min(held["bound"], CONCURRENCY + HERE), held
    assert held["requests_per_minute"] == 0, held
    # Paused and sent again, the job still goes at a share of the limit.
    assert (BATCHED + HERE) / seconds * 60 >= 0.3 * RPM, seconds


@pytest.mark.parametrize("wire", WIRES)
async def test_a_jobs_budget_holds_across_runners_priced_from_the_wire(wire: str) -> None:
    namespace = fresh_namespace()
    items = 200
    async with serve(uniform_rules(), latency=Latency(fixed_ms=5, jitter_ms=5)) as sim:
        model = wire_model(wire, sim)
        bot = raygent.agent(
            model=model,
            backend=ray_backend_in(namespace),
            model_options={"max_tokens": MAX_TOKENS},
        )
        cost = await per_request(bot)
        budget = Budget(usd=items * cost / 3)
        before = answered(sim.stats())
        result = await raygent.batch(
            bot,
            questions(items),
            concurrency=CONCURRENCY,
            runners=RUNNERS,
            budget=budget,
            progress=False,
        )
        spent = (answered(sim.stats()) - before) * cost
    check_budget(result, budget, cost, spent, in_flight=CONCURRENCY)


def _sends_per_request(items: list[BatchItem], runs: list[raygent.AgentResult]) -> list[int]:
    """How many times each request was sent (1: answered at once)."""
    reports = [i.result.report for i in items if i.result is not None]
    reports += [run.report for run in runs]
    return [max(1, len(trip.attempts)) for report in reports for trip in report.trips]

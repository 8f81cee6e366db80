"""Rate limits held cluster-wide on Ray, against a simulator that enforces them as the
providers do (buckets of a second's share, or one-second sliding windows, 429s past
them, their headers on every reply): this process, runner actors and driver processes
of their own share one model's rate through the gateway, learn it from the headers
when nothing is configured, and get a dead process's share back when its lease expires."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest
import ray
from driver_support import drivers, ended, fresh_namespace, ray_backend_in
from ray_support import Runner, sim_model, summary

import raygent
from raygent import RateLimit
from raygent.actors import endpoint_digest, gateway_names
from raygent.actors.gateway.access import rate_key
from raygent.sim import Latency, SimRateLimits, SimStats, serve

pytestmark = pytest.mark.usefixtures("ray_session")

RPM = 600  # 10 a second: each test sends a few seconds' worth
WINDOWED = SimRateLimits(requests_per_minute=RPM, window_seconds=1.0)  # 10 in any second


def throttled(stats: SimStats) -> int:
    """The 429s the simulator sent for a rate (not for its concurrency cap)."""
    return sum(n for cause, n in stats.rate_limited.items() if cause != "concurrency")


async def rate_stats(model: raygent.OpenAIModel, namespace: str) -> dict[str, Any]:
    """The gateway's ledger of the model's rate ({}: no gateway yet)."""
    try:
        gateway = ray.get_actor(gateway_names(1)[0], namespace=namespace)
    except ValueError:  # not made yet
        return {}
    found: dict[str, Any] = await gateway.stats.remote(endpoint_digest(rate_key(model)))
    return found


async def test_a_rate_holds_across_this_process_and_runners_within_one_429() -> None:
    namespace = fresh_namespace()
    # Over sliding windows: every holder sends its requests at the times granted.
    async with serve(rate_limits=WINDOWED) as sim:
        model = sim_model(sim, rate_limit=RateLimit(requests_per_minute=RPM))
        bot = raygent.agent(model=model, backend=ray_backend_in(namespace))
        actors = [Runner.remote() for _ in range(2)]  # type: ignore[attr-defined]
        here = asyncio.gather(*(bot.execute(f"here {i}") for i in range(30)))
        there = [a.run.remote(bot, [f"runner {i}" for i in range(15)]) for a in actors]
        mine, theirs = await here, await asyncio.gather(*there)
        held = await rate_stats(model, namespace)
        stats = sim.stats()
        for actor in actors:
            ray.kill(actor)
    statuses = [summary(r)["status"] for r in mine] + [r["status"] for b in theirs for r in b]
    assert statuses == ["completed"] * 60
    # Sent at the times granted: a window crowded now and then by a send delayed on its
    # way on a loaded machine (a request sent again after its retry-after), no more.
    assert throttled(stats) <= 1, stats.rate_limited
    assert stats.admitted_requests == 60
    assert held["requests_per_minute"] == RPM  # configured: held as it is


async def test_input_and_output_tokens_are_held_apart_and_settled_at_their_use() -> None:
    namespace = fresh_namespace()
    # Anthropic's way: input tokens, and output tokens charged at their cap when a
    # request is admitted, the unused part given back when its reply ends.
    limits = dict(input_tokens_per_minute=3000, output_tokens_per_minute=6000)
    async with serve(rate_limits=SimRateLimits(**limits)) as sim:  # type: ignore[arg-type]
        model = sim_model(sim, rate_limit=RateLimit(**limits))  # type: ignore[arg-type]
        bot = raygent.agent(
            model=model, backend=ray_backend_in(namespace), model_options={"max_tokens": 200}
        )
        results = await asyncio.gather(*(bot.execute(f"q {i}") for i in range(40)))
        held = await rate_stats(model, namespace)
        stats = sim.stats()
    assert [summary(r)["status"] for r in results] == ["completed"] * 40
    assert throttled(stats) == 0, stats.rate_limited
    assert (held["input_tokens_per_minute"], held["output_tokens_per_minute"]) == (3000, 6000)
    assert held["requests_per_minute"] == 0  # not configured, and the headers name none
    # 40 requests reserved 200 output tokens each: 8,000, more than the minute's 6,000
    # allows at once; they went because what each did not use came back.
    assert stats.admitted_output_tokens == 40 * 200


async def test_a_rate_nobody_configured_is_learnt_from_the_headers() -> None:
    namespace = fresh_namespace()
    async with serve(rate_limits=SimRateLimits(requests_per_minute=RPM)) as sim:
        model = sim_model(sim)  # no rate_limit: learnt
        bot = raygent.agent(model=model, backend=ray_backend_in(namespace))
        results = await asyncio.gather(*(bot.execute(f"q {i}") for i in range(60)))
        held = await rate_stats(model, namespace)
        stats = sim.stats()
    assert [summary(r)["status"] for r in results] == ["completed"] * 60
    assert throttled(stats) <= 3, stats.rate_limited  # 5%
    assert 0.5 * RPM <= held["requests_per_minute"] <= RPM


async def test_three_drivers_sharing_one_limit_stay_under_it_together() -> None:
    namespace = fresh_namespace()
    async with serve(rate_limits=WINDOWED) as sim:
        with drivers(sim, namespace, count=3, runs=30, bound=64, rpm=RPM) as procs:
            outcomes = [await ended(proc) for proc in procs]
        stats = sim.stats()
    assert [s for o in outcomes for s in o["statuses"]] == ["completed"] * 90
    # Three processes' sends meet the windows at the times granted: a window crowded
    # now and then by a send delayed on its way on a loaded machine (CI, with Ray's
    # workers and two other drivers on two cores, saw 2 of 92); the 1% figure on a
    # machine not loaded by the test itself is the benchmark's (bench_rate_limits.py
    # --backend ray --drivers 3).
    assert throttled(stats) <= 2, stats.rate_limited
    assert stats.admitted_requests == 90


async def test_a_driver_killed_holding_rate_budget_gives_its_share_back() -> None:
    namespace, ttl = fresh_namespace(), 1.0
    async with serve(
        rate_limits=SimRateLimits(requests_per_minute=RPM), latency=Latency(fixed_ms=50)
    ) as sim:
        model = sim_model(sim, rate_limit=RateLimit(requests_per_minute=RPM))
        bot = raygent.agent(model=model, backend=ray_backend_in(namespace, lease_ttl=ttl))
        with drivers(sim, namespace, count=1, runs=1000, bound=64, rpm=RPM, lease_ttl=ttl) as [
            other
        ]:
            assert other.stdout is not None
            assert (await asyncio.to_thread(other.stdout.readline)).strip() == "READY"
            mine = asyncio.ensure_future(
                asyncio.gather(*(bot.execute(f"q {i}") for i in range(150)))
            )
            await _until(lambda s: s.get("holders") == 2, model, namespace)  # sharing the rate
            os.kill(other.pid, signal.SIGKILL)  # holding its piece of the rate, and asking
            await _until(lambda s: s.get("holders") == 1, model, namespace, timeout=ttl * 10)
            alone_at, before = time.monotonic(), sim.stats().admitted_requests
            results = await mine
            alone = (sim.stats().admitted_requests - before) / (time.monotonic() - alone_at)
            stats = sim.stats()
    assert [summary(r)["status"] for r in results] == ["completed"] * 150
    assert throttled(stats) <= 2, stats.rate_limited
    # Sharing, it had half of the 10 a second; alone again, the whole rate.
    assert alone > 0.7 * RPM / 60, alone


async def _until(
    predicate: Any, model: raygent.OpenAIModel, namespace: str, timeout: float = 30.0
) -> None:
    """Wait (bounded) until the gateway's ledger of the model's rate satisfies it."""
    deadline = time.monotonic() + timeout
    while not predicate(await rate_stats(model, namespace)):
        assert time.monotonic() < deadline, await rate_stats(model, namespace)
        await asyncio.sleep(0.05)

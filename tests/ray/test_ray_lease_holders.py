"""Leases on Ray, across processes: driver processes of their own, runner actors and this
test process all hold slices of one endpoint's bound, and the bound holds, moves to
where the work is, survives the processes that made it, and comes back from a process
that died holding a slice."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from driver_support import drivers, ended, fresh_namespace, ray_backend_in
from ray_support import Runner, sim_model, summary, wait_for

import raygent
from raygent._batch import BatchItem, batch
from raygent.actors import gateway_names
from raygent.sim import Fault, Latency, Match, Reply, Rule, serve

pytestmark = pytest.mark.usefixtures("ray_session")


async def test_drivers_and_runners_at_five_times_the_bound_never_pass_it() -> None:
    namespace, bound = fresh_namespace(), 16
    async with serve(latency=Latency(fixed_ms=400)) as sim:
        model = sim_model(sim, max_concurrency=bound)
        bot = raygent.agent(model=model, backend=ray_backend_in(namespace))
        actors = [Runner.remote() for _ in range(2)]  # type: ignore[attr-defined]
        with drivers(sim, namespace, count=3, runs=bound, bound=bound) as procs:
            here = asyncio.gather(*(bot.execute(f"here {i}") for i in range(bound)))
            there = asyncio.gather(
                *(a.run.remote(bot, [f"runner {i}" for i in range(bound)]) for a in actors)
            )
            outcomes = [await ended(proc) for proc in procs]
            mine, theirs = await here, await there
        stats = sim.stats()
        for actor in actors:
            ray.kill(actor)
    statuses = [s for o in outcomes for s in o["statuses"]]
    statuses += [summary(r)["status"] for r in mine]
    statuses += [r["status"] for batch_ in theirs for r in batch_]
    assert statuses == ["completed"] * 6 * bound  # 3 drivers, 2 runners and this process
    assert stats.requests == 6 * bound
    assert stats.peak_in_flight == bound  # reached, never passed


async def test_a_gateway_outlives_the_driver_that_made_it() -> None:
    namespace, bound = fresh_namespace(), 8
    async with serve(latency=Latency(fixed_ms=500)) as sim:
        bot = raygent.agent(
            model=sim_model(sim, max_concurrency=bound),
            backend=ray_backend_in(namespace, lease_ttl=1.0),
        )
        with drivers(sim, namespace, count=1, runs=4, bound=bound, lease_ttl=1.0) as [first]:
            assert first.stdout is not None
            assert (await asyncio.to_thread(first.stdout.readline)).strip() == "READY"
            await wait_for(sim, lambda s: s.requests >= 1)  # its lease, and the gateway, exist
            # Three waves of runs here, in flight while the driver that made the
            # gateway exits: every later admission needs the lease, renewed every 1/3 s.
            mine = asyncio.gather(*(bot.execute(f"q{i}") for i in range(3 * bound)))
            theirs = await ended(first)
            results = await mine
        gateway = ray.get_actor(gateway_names(1)[0], namespace=namespace)
        alive = await gateway.stats.remote()
    assert theirs["statuses"] == ["completed"] * 4
    assert [summary(r)["status"] for r in results] == ["completed"] * 3 * bound
    assert alive["syncs"] > 0


async def test_a_runner_killed_holding_a_slice_gives_it_back_at_its_lease_timeout(
    tmp_path: Path,
) -> None:
    namespace, bound, ttl = fresh_namespace(), 8, 2.0
    async with serve(latency=Latency(fixed_ms=200)) as sim:
        bot = raygent.agent(
            model=sim_model(sim, max_concurrency=bound),
            backend=ray_backend_in(namespace, lease_ttl=ttl),
        )
        runner_pids = await _runner_pids(bot, tmp_path)  # the runners this batch will use
        killed: list[float] = []
        dead = asyncio.Event()

        def kill_one(item: BatchItem) -> None:
            if not killed and item.index >= 16 and item.ok:
                os.kill(runner_pids[0], signal.SIGKILL)  # mid-batch, holding its slice
                killed.append(time.monotonic())
                dead.set()

        async def watch() -> float:
            """Once a runner died: when the simulator sees the whole bound in flight again."""
            await dead.wait()
            sim.reset()
            await wait_for(sim, lambda s: s.in_flight == bound, timeout=ttl * 4)
            return time.monotonic() - killed[0]

        watcher = asyncio.ensure_future(watch())
        rows = [f"q{i}" for i in range(240)]
        result = await batch(bot, rows, concurrency=32, runners=2, on_item=kill_one, progress=False)
        back_after = await asyncio.wait_for(watcher, ttl * 5)
        stats = sim.stats()
    assert killed and result.report.succeeded == 240, result.report
    assert stats.peak_in_flight <= bound
    assert back_after < ttl * 4  # the dead runner's slice came back within its lease


class _Pid:
    """An async callable on a backend (as an agent is): where it ran. Each call waits
    until calls have run in two processes (files in `folder`), so both runners get some."""

    def __init__(self, backend: Any, folder: Path) -> None:
        self.backend, self.folder = backend, folder

    async def __call__(self, item: int) -> int:
        (self.folder / str(os.getpid())).touch()
        deadline = time.monotonic() + 60
        while len(list(self.folder.iterdir())) < 2:
            assert time.monotonic() < deadline, "a second runner never ran anything"
            await asyncio.sleep(0.01)
        return os.getpid()


async def _runner_pids(bot: raygent.Agent, folder: Path) -> list[int]:
    """The pids of this driver's two runners for `bot`'s backend (kept for its next
    batch, which uses the same ones)."""
    where = _Pid(bot.backend, folder)
    first = await batch(where, range(16), concurrency=4, runners=2, progress=False)
    pids = sorted(set(first.data))
    assert len(pids) == 2
    return pids


async def test_a_retry_after_pauses_every_holder_in_every_process() -> None:
    namespace, pause = fresh_namespace(), 1.5
    script = [
        Rule(
            match=Match(last_user="slow down"),
            reply=Reply(fault=Fault(kind="status", status=429, retry_after=pause)),
            times=1,
        ),
    ]
    # Replies slow enough that a slot freeing up while the pause travels to the other
    # processes (a few ms, more on a loaded machine) is rare: the window then counts
    # what was in flight, not the propagation's luck.
    async with serve(script, latency=Latency(fixed_ms=100)) as sim:
        bot = raygent.agent(
            model=sim_model(sim, max_concurrency=16), backend=ray_backend_in(namespace)
        )
        actors = [Runner.remote() for _ in range(2)]  # type: ignore[attr-defined]
        await asyncio.gather(*(a.run.remote(bot, ["warm up"]) for a in actors))
        # Both runners keep runs going; this process sends the one that gets the 429.
        busy = [a.run.remote(bot, [f"steady {i}" for i in range(200)]) for a in actors]
        await wait_for(sim, lambda s: s.requests > 40)
        limited = asyncio.ensure_future(bot.execute("slow down"))
        await wait_for(sim, lambda s: s.by_status.get(429) == 1)
        paused_at, before = time.monotonic(), sim.stats().requests
        await asyncio.sleep(pause * 0.6)  # a window inside the pause, measured
        during = sim.stats().requests - before
        results = await asyncio.gather(*busy)
        assert (await limited).ok
        for actor in actors:
            ray.kill(actor)
    assert time.monotonic() - paused_at > pause
    # Only what was already in flight when the 429 came back; nothing new was sent.
    assert during <= 16
    assert all(r["status"] == "completed" for batch_ in results for r in batch_)

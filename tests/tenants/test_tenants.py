"""Tenants (issue #45, point 4): two tenants of weights 1 and 3 share an endpoint's bound
1:3 while both wait, a lone tenant has all of it, a tenant's exhausted budget fails only
its own items, an unknown tenant's name is a typed error, and on Ray a tenant registered
by one driver is seen by another. On both backends (`test_x[local]`, `test_x[ray]`).

The share is counted in the order the simulator received the requests (the order they
were admitted), never timed."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import raygent
from raygent import Budget, OpenAIModel, Tenant
from raygent.observers.otel.requests import requests_of
from raygent.sim import Latency, Reply, Rule, Simulator, serve
from raygent.stores import SQLiteStore

BOUND = 16
DRIVER = Path(__file__).with_name("tenant_driver.py")


def _model(sim: Simulator) -> OpenAIModel:
    return OpenAIModel(
        "sim-gpt", base_url=sim.openai_base_url, api_key="sk-tenants", max_concurrency=BOUND
    )


def _items(tenant: Tenant | str, count: int) -> list[dict[str, object]]:
    name = tenant if isinstance(tenant, str) else tenant.name
    return [{"input": f"{name} {i}", "key": f"{name}-{i}", "tenant": tenant} for i in range(count)]


def _interleaved(*lists: list[dict[str, object]]) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for group in zip(*lists, strict=True):
        out.extend(group)
    return out


def _senders(sim: Simulator) -> list[str]:
    """Which tenant each request the simulator received was for, in order."""
    names = []
    for record in sim.requests:
        text = json.dumps(record.body)
        names.append("light" if "light " in text else "heavy" if "heavy " in text else "?")
    return names


async def _busy(agent: raygent.Agent, tenant: Tenant, runs: int, workers: int) -> int:
    """`workers` callers of `tenant`, each running its runs one after another: the tenant
    has `workers` requests waiting or in flight until its `runs` are done."""
    left = list(range(runs))

    async def worker() -> int:
        done = 0
        while left:
            result = await agent.execute(f"{tenant.name} {left.pop()}", tenant=tenant)
            done += result.ok
        return done

    return sum(await asyncio.gather(*(worker() for _ in range(workers))))


async def test_two_busy_tenants_share_a_bound_by_weight(backend_kind: str) -> None:
    light, heavy = Tenant("light", weight=1), Tenant("heavy", weight=3)
    with serve([Rule(reply=Reply(text="ok"))], latency=Latency(fixed_ms=20)) as sim:
        agent = raygent.agent(model=_model(sim))
        done = await asyncio.gather(_busy(agent, light, 200, 32), _busy(agent, heavy, 300, 32))
        senders = _senders(sim)
        peak = sim.stats().peak_in_flight
    assert done == [200, 300]
    assert peak <= BOUND
    # While both wait (the heavy one's 300 go in the first 400 or so): a quarter light,
    # after the first slots (taken by whoever came first: no credit for arriving late).
    window = senders[2 * BOUND : 320]
    share = window.count("light") / len(window)
    assert 0.25 * 0.9 <= share <= 0.25 * 1.1, share
    # Then the light one alone: all of the bound.
    assert set(senders[-40:]) == {"light"}


async def test_a_lone_tenant_has_the_whole_bound(backend_kind: str) -> None:
    light = Tenant("light", weight=1)
    with serve([Rule(reply=Reply(text="ok"))], latency=Latency(fixed_ms=20)) as sim:
        agent = raygent.agent(model=_model(sim))
        result = await raygent.batch(
            agent, _items(light, 96), concurrency=48, runners=1, progress=False
        )
        peak = sim.stats().peak_in_flight
    assert result.report.succeeded == 96
    assert peak == BOUND  # a weight of 1 of 4, alone: all of it


async def test_a_tenants_spent_budget_stops_only_its_items(backend_kind: str) -> None:
    name = f"capped-{uuid.uuid4().hex[:6]}"  # its budget is its own, whichever run
    capped = Tenant(name, budget=Budget(requests=5))
    free = Tenant("free")
    with serve([Rule(reply=Reply(text="ok"))], latency=Latency(fixed_ms=2)) as sim:
        agent = raygent.agent(model=_model(sim))
        items = _interleaved(_items(capped, 20), _items(free, 20))
        result = await raygent.batch(agent, items, concurrency=8, runners=1, progress=False)
    by_key = {item.key: item for item in result.items}
    assert all(by_key[f"free-{i}"].ok for i in range(20))
    capped_items = [by_key[f"{name}-{i}"] for i in range(20)]
    done = [item for item in capped_items if item.ok]
    assert 1 <= len(done) <= 5
    failed = [item for item in capped_items if not item.ok]
    assert failed and all(item.error is not None for item in failed)
    assert {item.error.code for item in failed if item.error} == {"BUDGET_EXCEEDED"}
    assert result.report.errors == {"BUDGET_EXCEEDED": len(failed)}


async def test_a_tenant_by_name_and_an_unknown_name(backend_kind: str, tmp_path: Path) -> None:
    name = f"acme-{uuid.uuid4().hex[:6]}"
    raygent.register_tenant(Tenant(name, weight=2, budget=Budget(requests=100)))
    with serve([Rule(reply=Reply(text="ok"))]) as sim:
        agent = raygent.agent(model=_model(sim))
        started: list[str | None] = []
        ok = await agent.execute(
            "hi", tenant=name, on={"agent.starting": lambda e: started.append(e.tenant)}
        )
        unknown = await agent.execute("hi", tenant="no-such-tenant")
        streamed = agent.stream("hi", tenant=name)
        async for _ in streamed:
            pass
        result = await streamed.result
        remembering = raygent.agent(
            model=_model(sim), memory=raygent.Memory(SQLiteStore(tmp_path / "s.db"))
        )
        session = await remembering.session(f"s-{name}").execute("hi", tenant=name)
        sent = sim.stats().requests
    assert ok.ok and ok.report.tenant == name and started == [name]
    # Telemetry: each request's record (its span's and metric points' `raygent.tenant`).
    assert [r.tenant for r in requests_of(ok.report)] == [name]
    assert result.ok and result.report.tenant == name
    assert session.ok and session.report.tenant == name
    assert not unknown.ok and unknown.error is not None
    assert unknown.error.code == "UNKNOWN_TENANT" and unknown.error.details["tenant"] == (
        "no-such-tenant"
    )
    assert sent == 3  # the unknown tenant's run was not sent


async def test_a_tenant_registered_on_ray_is_seen_by_another_driver(backend_kind: str) -> None:
    if backend_kind != "ray":
        # Locally a registration is this process's: another process does not see it.
        name = f"local-{uuid.uuid4().hex[:6]}"
        raygent.register_tenant(Tenant(name))
        assert raygent.current_backend().tenants.get(name) is not None
        return
    import ray

    name = f"shared-{uuid.uuid4().hex[:6]}"
    raygent.register_tenant(Tenant(name, weight=3))
    with serve([Rule(reply=Reply(text="ok"))]) as sim:
        args = [
            *("--address", ray.get_runtime_context().gcs_address),
            *("--namespace", "raygent-tests", "--base-url", sim.openai_base_url),
            *("--tenant", name, "--items", "4"),
        ]
        proc = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(DRIVER), *args],
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, "RAYGENT_OFFLINE": "1"},
        )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    seen = json.loads(lines[-1].removeprefix("RESULT "))
    assert seen == {"tenant": name, "weight": 3, "succeeded": 4}


@pytest.mark.local_only("the fair share's own order, in this process")
async def test_the_fair_share_lets_tenants_through_by_weight(backend_kind: str) -> None:
    from raygent.seams.fair_share import FairShare

    share, order = FairShare(), []
    light, heavy = Tenant("light", weight=1), Tenant("heavy", weight=3)
    for _ in range(2):  # the slots, taken at once
        await share.acquire(light, 2)

    async def one(tenant: Tenant) -> None:
        await share.acquire(tenant, 2)
        order.append(tenant.name)

    waiting = [asyncio.ensure_future(one(t)) for t in [light] * 8 + [heavy] * 24]
    await asyncio.sleep(0)  # (every task reaches its wait: not timing, one loop turn)
    for _ in range(32):
        share.release()
        await asyncio.sleep(0)
    await asyncio.gather(*waiting)
    # Stride scheduling: within one request of the exact share at every point.
    for n in range(4, 33, 4):
        assert abs(order[:n].count("light") - n / 4) <= 1.25, order


@pytest.mark.local_only("the fair share's own order, in this process")
async def test_requests_of_no_tenant_take_their_turn_as_one_of_weight_one(
    backend_kind: str,
) -> None:
    heavy = Tenant("heavy", weight=3)
    with serve([Rule(reply=Reply(text="ok"))], latency=Latency(fixed_ms=20)) as sim:
        agent = raygent.agent(model=_model(sim))
        await agent.execute("heavy warm", tenant=heavy)  # tenants share the endpoint now
        none = Tenant("light")  # (its runs go with no tenant: named for `_senders`)
        done = await asyncio.gather(
            _busy(agent, heavy, 300, 32), _busy_untenanted(agent, none.name, 200, 32)
        )
        senders = _senders(sim)[1:]
    assert done == [300, 200]
    window = senders[2 * BOUND : 320]
    share = window.count("light") / len(window)
    assert 0.25 * 0.9 <= share <= 0.25 * 1.1, share


async def _busy_untenanted(agent: raygent.Agent, name: str, runs: int, workers: int) -> int:
    left = list(range(runs))

    async def worker() -> int:
        done = 0
        while left:
            done += (await agent.execute(f"{name} {left.pop()}")).ok
        return done

    return sum(await asyncio.gather(*(worker() for _ in range(workers))))

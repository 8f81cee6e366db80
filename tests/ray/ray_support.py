"""Helpers for the Ray backend tests: the backend, models on the simulator, runner actors.

Every Ray test module sets `pytestmark = pytest.mark.usefixtures("ray_session")`: Ray is
started once per session by tests/conftest.py, never by a test.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import ray

import raygent
from raygent import AgentResult, OpenAIModel
from raygent.actors import RayOptions, endpoint_digest, gateway_key, gateway_names, ray_backend
from raygent.seams.contract import Backend
from raygent.sim import SimStats, Simulator

KEY = "sk-ray-test-000000"
NAMESPACE = "raygent-tests"  # the namespace of the session's ray.init


def backend(**options: Any) -> Backend:
    """A Ray backend in the tests' namespace (not `raygent.init`: that would change the
    process-wide default for every later test)."""
    return ray_backend(RayOptions(namespace=NAMESPACE, **options))


async def gateway_stats(model: OpenAIModel, replica: int = 0, replicas: int = 1) -> dict[str, Any]:
    """The ledger a gateway replica keeps for the model's endpoint."""
    name = gateway_names(replicas)[replica]
    gateway = ray.get_actor(name, namespace=NAMESPACE)
    stats: dict[str, Any] = await gateway.stats.remote(endpoint_digest(gateway_key(model)))
    return stats


async def wait_for_replicas(model: OpenAIModel, replicas: int, timeout: float = 20.0) -> None:
    """Wait (bounded) until every gateway replica's actor is up and answers (a replica
    may start well after the first: its lease slice is only granted then)."""
    deadline = time.monotonic() + timeout
    for replica in range(replicas):
        while True:
            try:
                await gateway_stats(model, replica, replicas)
                break
            except ValueError:  # the replica's named actor is not registered yet
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"gateway replica {replica} never started")
            await asyncio.sleep(0.02)


def sim_model(sim: Simulator, **kwargs: Any) -> OpenAIModel:
    kwargs.setdefault("api_key", KEY)
    return OpenAIModel("sim-gpt", base_url=sim.openai_base_url, **kwargs)


async def wait_for(
    sim: Simulator, predicate: Callable[[SimStats], bool], timeout: float = 10.0
) -> SimStats:
    """Wait (bounded) until the simulator's stats satisfy `predicate`."""
    return await sim.wait_until(predicate, timeout)


def write_whole(path: str | Path, text: str) -> None:
    """Write a file a test waits for, so that once it exists it has its text (a plain
    write_text creates it empty first)."""
    aside = Path(f"{path}.writing")
    aside.write_text(text)
    aside.replace(path)


def _exists(path: Path) -> bool:
    return path.exists()  # a stat: too quick to hand to a thread


async def wait_for_file(path: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not _exists(path):
        if time.monotonic() > deadline:
            raise AssertionError(f"{path.name} never appeared")
        await asyncio.sleep(0.02)


async def wait_until_dead(pid: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} is still alive")
        await asyncio.sleep(0.05)


@ray.remote(num_cpus=0)
class Runner:
    """A process elsewhere in the cluster that runs an agent many times at once."""

    async def run(self, agent: raygent.Agent, prompts: Sequence[str]) -> list[dict[str, Any]]:
        results = await asyncio.gather(*(agent.execute(p) for p in prompts))
        return [summary(r) for r in results]

    def pid(self) -> int:
        return os.getpid()


def summary(result: AgentResult) -> dict[str, Any]:
    return {
        "status": result.report.status,
        "text": result.text,
        "error": None if result.error is None else result.error.to_dict(),
    }

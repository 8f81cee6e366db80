"""Driver processes of their own for the Ray tests: each runs `lease_driver.py`, joins
the test session's Ray and runs agent runs against the simulator."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ray

from raygent.actors import RayOptions, ray_backend
from raygent.sim import Simulator

DRIVER = Path(__file__).with_name("lease_driver.py")


def fresh_namespace() -> str:
    return f"raygent-leases-{uuid.uuid4().hex[:8]}"


def ray_backend_in(namespace: str, **options: Any) -> Any:
    return ray_backend(RayOptions(namespace=namespace, **options))


@contextmanager
def drivers(
    sim: Simulator, namespace: str, count: int, runs: int, bound: int, **flags: Any
) -> Iterator[list[subprocess.Popen[str]]]:
    """`count` driver processes, each running `runs` runs at once on the endpoint."""
    env = {**os.environ, "RAYGENT_OFFLINE": "1"}
    args = [
        *("--address", ray.get_runtime_context().gcs_address),
        *("--namespace", namespace, "--base-url", sim.openai_base_url),
        *("--bound", str(bound), "--runs", str(runs)),
    ]
    for flag, value in flags.items():
        args += [f"--{flag.replace('_', '-')}", str(value)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(DRIVER), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(count)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()  # a killed driver's output is never read to its end


async def ended(proc: subprocess.Popen[str], timeout: float = 120.0) -> dict[str, Any]:
    out, err = await asyncio.wait_for(asyncio.to_thread(proc.communicate), timeout)
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"exit {proc.returncode}\n{out[-2000:]}\n{err[-4000:]}"
    found: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return found

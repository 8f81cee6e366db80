"""Run the provider simulator in its own process, so its CPU is not the client's."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp


@contextmanager
def sim_process(*args: str) -> Iterator[str]:
    """Start `python -m raygent sim --port 0 ARGS`; yield its base URL (no /v1)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "raygent", "sim", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
            if found:
                yield f"http://127.0.0.1:{found.group(1)}"
                break
        else:
            raise RuntimeError("the simulator exited before printing its URL")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def sim_stats(
    base: str, reset: bool = False, http: aiohttp.ClientSession | None = None
) -> dict[str, Any]:
    """The simulator's counters (`GET /sim/stats`), zeroed first with `reset`; over
    `http` if given, else a session of its own."""
    if http is None:
        async with aiohttp.ClientSession() as own:
            return await sim_stats(base, reset, own)
    if reset:
        async with http.post(base + "/sim/reset"):
            pass
    async with http.get(base + "/sim/stats") as response:
        stats: dict[str, Any] = await response.json()
        return stats

"""First use with nothing running: no Ray, no RAY_ADDRESS, no `raygent.init()`.

In a running event loop (a Jupyter kernel, `asyncio.run`), `execute_sync` runs its call
on a short-lived helper thread; the first call that needs Ray starts it from there. Ray
ties the processes it starts to the thread that starts them, so Ray must be started on a
thread that lasts: else the next call that needs Ray takes the whole process down (exit
1, no traceback; in a kernel, "Kernel died").

Each test gives the process a Ray temp dir of its own (RAY_TMPDIR), so that `ray.init()`
finds no cluster to join and starts one, as on a fresh machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook
from test_notebook import CELL_TIMEOUT, problems, stdout

from raygent.sim import Reply, Rule, serve

SETUP = """
import raygent
model = raygent.OpenAIModel("gpt-4o-mini", base_url={url!r}, api_key="sk-test")
bot = raygent.agent(model=model)
"""
CELLS = [
    'print("first", bot.execute_sync("hello").report.status)',
    'print("batch", raygent.batch_sync(bot, ["a", "b", "c"]).report.succeeded)',
    "stream = bot.stream('streamed')\nasync for event in stream:\n    pass\n"
    'print("stream", (await stream.result).report.status)',
    'print("again", bot.execute_sync("once more").report.status)',
    "import ray\nprint('raylet', ray._private.worker._global_node.all_processes['raylet'][0]"
    ".process.pid)",
]
SCRIPT = """
import asyncio
import raygent

async def main():
    model = raygent.OpenAIModel("gpt-4o-mini", base_url={url!r}, api_key="sk-test")
    bot = raygent.agent(model=model)
    print("first", bot.execute_sync("hello").report.status, flush=True)
    print("batch", raygent.batch_sync(bot, ["a", "b", "c"]).report.succeeded, flush=True)
    print("again", bot.execute_sync("once more").report.status, flush=True)

asyncio.run(main())
"""


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    """A Ray temp dir of its own, short (Ray's socket paths must fit 107 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="rg-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def fresh_env(ray_tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAYGENT_BACKEND")}
    env["RAY_TMPDIR"] = str(ray_tmp)  # no cluster to join: Ray starts one here
    return env


def ray_processes(ray_tmp: Path) -> list[psutil.Process]:
    """The processes of the Ray that started under `ray_tmp` (their command lines name
    its session directory)."""
    marker = str(ray_tmp)
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in process.info["cmdline"] or []):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def wait_gone(ray_tmp: Path, timeout: float = 60.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while (left := ray_processes(ray_tmp)) and time.monotonic() < deadline:
        psutil.wait_procs(left, timeout=1)
    return ray_processes(ray_tmp)


@pytest.mark.timeout(300)
@pytest.mark.slow("starts a fresh Ray, as on a machine with none")
def test_a_script_whose_first_call_is_execute_sync_in_a_running_loop(ray_tmp: Path) -> None:
    with serve([Rule(reply=Reply(text="hi"))]) as sim:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT.format(url=sim.openai_base_url)],
            env=fresh_env(ray_tmp),
            capture_output=True,
            text=True,
            timeout=240,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split("\n")[:3] == ["first completed", "batch 3", "again completed"]
    # The Ray raygent started for it keeps its start-up lines to itself (#31).
    assert "Token authentication" not in done.stderr and "INFO" not in done.stderr, done.stderr
    assert wait_gone(ray_tmp) == []  # the Ray it started ended with it


@pytest.mark.timeout(300)
@pytest.mark.slow("starts a fresh Ray, as on a machine with none")
async def test_a_kernel_that_never_calls_init_lives_and_so_does_its_ray(
    tmp_path: Path, ray_tmp: Path
) -> None:
    client = NotebookClient(
        new_notebook(),
        timeout=CELL_TIMEOUT * 2,
        kernel_name="python3",
        resources={"metadata": {"path": tmp_path}},
    )
    with serve([Rule(reply=Reply(text="hi"))]) as sim:
        async with client.async_setup_kernel(env=fresh_env(ray_tmp)):
            cells = [SETUP.format(url=sim.openai_base_url), *CELLS]
            for index, source in enumerate(cells):
                cell = new_code_cell(source)
                client.nb.cells.append(cell)
                await client.async_execute_cell(cell, index)
            # Ray's start-up warnings (the SIGTERM handler, token authentication) may
            # show on stderr; no cell may fail, and the kernel must still answer.
            errors = [p for p in problems(client.nb) if "stderr" not in p]
            assert errors == []
            shown = [stdout(cell).strip() for cell in client.nb.cells[1:]]
            assert shown[:4] == [
                "first completed",
                "batch 3",
                "stream completed",
                "again completed",
            ]
            raylet = int(shown[4].split()[1])
            assert psutil.pid_exists(raylet)  # Ray lives as long as the kernel
            assert await client.kc.is_alive()
    assert wait_gone(ray_tmp) == []  # and ends with it

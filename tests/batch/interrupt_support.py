"""What the Ctrl-C tests share: the agent their driver processes run, the simulator's
script that hangs the slow items, and a shared Ray that a driver joins.

Importable as `interrupt_support` (pytest) and `tests.batch.interrupt_support` (the
CLI's target, run from the repository root).

`shared_ray()` starts a Ray cluster of the test's own with `ray start --head --block`,
as an operator starts one for several drivers, on ports of its own (never 6379, Redis's)
and a temporary folder of its own (so no other process's `ray.init()` finds it), and
stops it by ending that one process (its reaper stops the rest): never `ray stop`, which
would stop every Ray on the machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import raygent
from raygent.sim import Fault, Match, Reply, Rule

ROOT = Path(__file__).resolve().parents[2]
URL_VAR = "RAYGENT_TEST_SIM_URL"
PRICING = raygent.Pricing(input_per_mtok=1.0, output_per_mtok=2.0)
FAST, SLOW, CONCURRENCY = 40, 30, 8

# The CLI's target: the model is the simulator the test serves (read when the driver
# imports this; the agent goes to Ray's runners with its URL in it), priced, so the cost
# line can be checked against what the simulator received.
agent = raygent.agent(
    model=raygent.OpenAIModel(
        "sim-gpt",
        base_url=os.environ.get(URL_VAR, "http://127.0.0.1:9"),
        api_key="sk-sim",
        pricing=PRICING,
    ),
    name="interrupted",
)

# The first CONCURRENCY slow requests never answer (so a driver interrupted once they
# are all in flight has them to cancel); later ones, a resume's, answer at once.
SCRIPT = [
    Rule(match=Match(last_user="^slow"), reply=Reply(fault=Fault(kind="hang")), times=CONCURRENCY),
    Rule(match=Match(), reply=Reply(text="done")),
]


def items() -> list[dict[str, str]]:
    """FAST items that answer, then SLOW ones that hang: interrupted once the slow ones
    fill every slot, the job has FAST completed and CONCURRENCY in flight."""
    rows = [{"input": f"fast {n}", "key": f"f{n}"} for n in range(FAST)]
    return rows + [{"input": f"slow {n}", "key": f"s{n}"} for n in range(SLOW)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def shared_ray() -> Iterator[str]:
    """A running Ray cluster that driver processes join: yields its address (for
    RAY_ADDRESS). Token authentication is off for it and its drivers
    (`RAY_AUTH_MODE=disabled` in their environment: `driver_env`)."""
    folder = tempfile.mkdtemp(prefix="rg-ray-")  # short: Ray's socket paths must fit
    port = free_port()
    ports = {
        "--port": port,
        "--ray-client-server-port": free_port(),
        "--dashboard-agent-listen-port": free_port(),
    }
    command = [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block"]
    command += [f"{flag}={value}" for flag, value in ports.items()]
    command += [
        "--node-ip-address=127.0.0.1",
        f"--temp-dir={folder}",
        "--num-cpus=4",
        "--include-dashboard=false",
        "--disable-usage-stats",
    ]
    # Its workers import what the drivers name by reference (the repository's tests),
    # as an operator's cluster has the code its drivers use.
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    log = Path(folder) / "ray-start.log"
    with log.open("w") as out:
        head = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        # `ray start --block` says when it is up (a bounded wait on what it writes).
        deadline = time.monotonic() + 120
        while "block forever" not in log.read_text():
            said = log.read_text()
            assert head.poll() is None, f"ray start ended before it was up:\n{said}"
            assert time.monotonic() < deadline, f"ray start not up in time:\n{said}"
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
        shutil.rmtree(folder, ignore_errors=True)


def driver_env(backend: str, sim_url: str, address: str | None = None) -> dict[str, str]:
    """A driver process's environment: its backend, the simulator, and on "ray" the
    shared cluster it joins."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update({"RAYGENT_BACKEND": backend, URL_VAR: sim_url, "RAY_AUTH_MODE": "disabled"})
    if address is not None:
        env["RAY_ADDRESS"] = address
    return env

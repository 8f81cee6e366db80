"""Ctrl-C on a batch (issue 44.3, 44.5): a driver process of its own gets a real SIGINT
once it has reached a known point (every fast item in the sink, every slot held by a
slow item the simulator never answers), on the local backend and on a shared Ray (a
cluster started with `ray start`, which the driver joins as drivers join a cluster).

Whatever the backend: the sink holds each item once (exactly once, whatever the driver
joins), the cancelled items read one code (`ABORTED`), the cost counts every request the
simulator received (those cut off in flight too, their input priced), nothing is printed
twice and no traceback at all, and a resume completes the job, sending only what had not
completed.
"""

from __future__ import annotations

import ast
import asyncio
import re
import signal
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from batch_support import line_count, read_jsonl, write_jsonl
from interrupt_support import (
    CONCURRENCY,
    FAST,
    PRICING,
    ROOT,
    SCRIPT,
    SLOW,
    driver_env,
    items,
    shared_ray,
)
from shared_support import until

from raygent.sim import Simulator, serve

# On Ray each test's driver joins a cluster the module starts (`ray start`, ~10 s).
BACKENDS = ("local", pytest.param("ray", marks=pytest.mark.slow("joins a Ray of its own")))
# A Ray runner holds a quarter more jobs than its slots (queued, never sent): cancelled too.
HELD_AHEAD = CONCURRENCY // 4


@pytest.fixture(scope="module")
def shared_address() -> Iterator[str]:
    with shared_ray() as address:
        yield address


def address_for(backend: str, request: pytest.FixtureRequest) -> str | None:
    return request.getfixturevalue("shared_address") if backend == "ray" else None


async def interrupted(
    command: list[str], env: dict[str, str], sink: Path, sim: Simulator
) -> tuple[int, str, str]:
    """Run `command`; SIGINT it once every fast item is in the sink and every slot holds
    a slow item; (its exit status, stdout, stderr)."""
    driver = await asyncio.create_subprocess_exec(
        *command,
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        reached = False

        def there() -> bool:
            nonlocal reached
            reached = line_count(sink) >= FAST and sim.stats().in_flight >= CONCURRENCY
            return reached or driver.returncode is not None

        await until(there, timeout=180)
        assert reached, "the driver ended before it was interrupted"
        driver.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(driver.communicate(), 60)
    finally:
        if driver.returncode is None:
            driver.kill()
            await driver.wait()
    assert driver.returncode is not None
    return driver.returncode, out.decode(), err.decode()


def check_interrupted_sink(sink: Path, backend: str) -> None:
    """Each item once: the fast ones completed, the slow ones in flight (and on Ray those
    a runner held queued) cancelled with one code, nothing else."""
    records = read_jsonl(sink)
    keys = Counter(r["key"] for r in records)
    assert all(n == 1 for n in keys.values()), keys
    done = {r["key"] for r in records if r["status"] == "completed"}
    assert done == {f"f{n}" for n in range(FAST)}
    cancelled = [r for r in records if r["status"] == "cancelled"]
    assert len(records) == FAST + len(cancelled)
    ahead = HELD_AHEAD if backend == "ray" else 0
    assert CONCURRENCY <= len(cancelled) <= CONCURRENCY + ahead, len(cancelled)
    assert {r["error"]["code"] for r in cancelled} == {"ABORTED"}
    # The runs cut off in flight say so, beside the batch's one code.
    in_flight = [r for r in cancelled if r["error"].get("run_error") == "AGENT_CANCELLED"]
    assert len(in_flight) == CONCURRENCY


def check_cost(text: str, received: int) -> None:
    """The cost line counts every request the simulator received, priced."""
    found = re.search(r"cost: \$([\d.]+) \(([\d,]+) requests, ([\d,]+) in / ([\d,]+) out", text)
    assert found is not None, text
    cost, requests = float(found[1]), int(found[2].replace(",", ""))
    tokens_in, tokens_out = (int(found[n].replace(",", "")) for n in (3, 4))
    assert requests == received == FAST + CONCURRENCY
    priced = tokens_in * PRICING.input_per_mtok + tokens_out * PRICING.output_per_mtok
    assert cost == pytest.approx(priced / 1e6, rel=0.05)


def no_noise(text: str) -> None:
    for word in ("Traceback", "KeyError", "Unhandled error", "Exception"):
        assert word not in text, text


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", BACKENDS)
async def test_ctrl_c_on_the_cli_cancels_cleanly_once_and_resume_completes(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    address = address_for(backend, request)
    source = write_jsonl(tmp_path / "in.jsonl", items())
    sink = tmp_path / "out.jsonl"
    args = ["tests.batch.interrupt_support:agent", str(source), "-o", str(sink)]
    args += ["--concurrency", str(CONCURRENCY), "--no-progress", "--backend", backend]
    command = [sys.executable, "-m", "raygent", "batch", *args]
    with serve(SCRIPT) as sim:
        env = driver_env(backend, sim.openai_base_url, address)
        code, _, err = await interrupted(command, env, sink, sim)
        received = sim.stats().requests
        assert code == 130, err
        no_noise(err)
        # Said once, in the CLI's words.
        assert err.count("interrupted (Ctrl-C)") == 1, err
        assert err.count("to go on with this job: raygent batch") == 1, err
        assert "resume=True" not in err
        assert re.search(r"errors: ABORTED x\d+$", err, re.MULTILINE), err
        check_interrupted_sink(sink, backend)
        check_cost(err, received)

        resumed = await asyncio.create_subprocess_exec(
            *command, "--resume", env=env, cwd=ROOT, stderr=asyncio.subprocess.PIPE
        )
        _, said = await asyncio.wait_for(resumed.communicate(), 300)
        assert resumed.returncode == 0, said.decode()
        # Only what had not completed was sent again: the slow items, each once.
        assert sim.stats().requests == received + SLOW
    records = read_jsonl(sink)
    assert Counter(r["key"] for r in records) == Counter(r["key"] for r in items())
    assert all(r["status"] == "completed" for r in records)


SYNC_DRIVER = """
import sys
import raygent
from tests.batch.interrupt_support import agent, items

options = dict(concurrency={concurrency}, sink=sys.argv[1], progress=False)
result = raygent.batch_sync(agent, items(), **options)
print(repr(result))
print(result.report.errors, file=sys.stderr)
"""


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", BACKENDS)
async def test_ctrl_c_in_batch_sync_returns_the_result_and_says_it_once(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    address = address_for(backend, request)
    sink = tmp_path / "out.jsonl"
    script = SYNC_DRIVER.format(concurrency=CONCURRENCY)
    with serve(SCRIPT) as sim:
        env = driver_env(backend, sim.openai_base_url, address)
        code, out, err = await interrupted(
            [sys.executable, "-c", script, str(sink)], env, sink, sim
        )
        received = sim.stats().requests
    assert code == 0, err  # the result came back
    no_noise(out + err)
    assert (out + err).count("interrupted (Ctrl-C)") == 1, out + err
    assert f"{FAST} completed" in out and "resume=True" in out  # the Python hint, once
    errors: dict[str, Any] = ast.literal_eval(err.strip().splitlines()[-1])  # report.errors
    assert list(errors) == ["ABORTED"]
    check_interrupted_sink(sink, backend)
    assert "cost unknown" not in out  # priced, the cut-off requests too
    requests = [r["usage"]["requests"] for r in read_jsonl(sink)]
    assert sum(requests) == received == FAST + CONCURRENCY  # the cut-off ones counted too

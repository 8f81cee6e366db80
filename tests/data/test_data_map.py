"""`raygent.data.map` on Ray Data: a Parquet dataset in, each row with its result out,
through a real Ray Data pipeline against the simulator."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray
import ray.data

import raygent
from raygent import OpenAIModel
from raygent.actors import RayOptions, ray_backend
from raygent.sim import Fault, Latency, Match, Reply, Rule, Simulator, serve

pytestmark = [
    pytest.mark.usefixtures("ray_session"),
    # Ray Data reads its own deprecated settings when it starts a pipeline.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray\\.data\\..*"),
]

NAMESPACE = "raygent-tests"  # the namespace of the session's ray.init
ROWS = 96  # 12 rows in each of 8 files: both actors busy, the bound of 12 reached


def sim_model(sim: Simulator, **kwargs: Any) -> OpenAIModel:
    return OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key="sk-data-000000", **kwargs)


def write_dataset(folder: Path, rows: int, files: int = 8) -> Path:
    """`rows` rows (id, input) in `files` Parquet files: Ray Data reads them in parallel."""
    folder.mkdir()
    per = rows // files
    for part in range(files):
        ids = list(range(part * per, (part + 1) * per))
        table = pa.table({"id": ids, "input": [f"question {i}" for i in ids]})
        pq.write_table(table, folder / f"part-{part}.parquet")
    return folder


async def run_to_parquet(dataset: Any, out: Path) -> pa.Table:
    """Run the pipeline (blocking: off the loop the simulator serves on), read it back."""
    await asyncio.to_thread(dataset.write_parquet, str(out))
    return pq.read_table(out)


async def test_a_parquet_dataset_runs_through_an_agent_each_row_once(tmp_path: Path) -> None:
    source = write_dataset(tmp_path / "in", ROWS)
    async with serve(latency=Latency(fixed_ms=5)) as sim:
        bot = raygent.agent(
            model=sim_model(sim, max_concurrency=12),
            backend=ray_backend(RayOptions(namespace=NAMESPACE)),
        )
        dataset = raygent.data.map(
            # Small files are read as one block: spread them over both actors.
            ray.data.read_parquet(str(source)).repartition(8),
            bot,
            concurrency=48,
            actors=2,
        )
        table = await run_to_parquet(dataset, tmp_path / "out")
        stats = sim.stats()
    rows = table.to_pylist()
    assert sorted(r["id"] for r in rows) == list(range(ROWS))  # every row, once
    assert {r["result_status"] for r in rows} == {"completed"}
    assert all(r["result_text"] and r["result_run_id"] for r in rows)
    assert all(r["result_input_tokens"] > 0 and r["result_attempts"] == 1 for r in rows)
    assert all(r["input"] == f"question {r['id']}" for r in rows)  # the row kept its columns
    assert stats.requests == ROWS
    assert stats.peak_in_flight <= 12  # the gateway's bound, across both actors
    assert stats.peak_in_flight >= 2  # and runs did overlap


async def test_a_bad_row_becomes_an_error_row_and_the_job_goes_on(tmp_path: Path) -> None:
    rows = [{"id": i, "input": f"q{i}"} for i in range(20)]
    rows[3]["input"] = None  # a missing value: the agent cannot run it
    rows[7]["input"] = "reject me"  # the provider answers 400
    script = [
        Rule(
            match=Match(last_user="reject me"), reply=Reply(fault=Fault(kind="status", status=400))
        )
    ]
    async with serve(script) as sim:
        bot = raygent.agent(
            model=sim_model(sim), backend=ray_backend(RayOptions(namespace=NAMESPACE))
        )
        dataset = raygent.data.map(
            ray.data.from_items(rows), bot, concurrency=8, actors=1, output_column="out"
        )
        table = await run_to_parquet(dataset, tmp_path / "out")
    by_id = {r["id"]: r for r in table.to_pylist()}
    assert sorted(by_id) == list(range(20))
    assert by_id[3]["out_status"] == "failed"
    assert by_id[3]["out_error_code"] == "BATCH_INPUT"
    assert by_id[3]["out_attempts"] == 0
    assert by_id[7]["out_status"] == "failed"
    assert by_id[7]["out_error_code"] and by_id[7]["out_error_message"]
    assert by_id[7]["out_attempts"] == 1  # a 400 is not retried
    assert by_id[7]["out_data"] is None
    others = [r for i, r in by_id.items() if i not in (3, 7)]
    assert {r["out_status"] for r in others} == {"completed"}
    assert all(r["out_error_code"] is None for r in others)


async def test_an_actor_killed_mid_job_is_restarted_and_each_row_comes_out_once(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "killed"

    async def work(value: int) -> dict[str, int]:
        # Row 37 takes its actor's process down the first time it runs (the marker
        # says it has): Ray Data restarts the actor and runs the lost task again.
        if value == 37 and not marker.exists():
            marker.write_text(str(os.getpid()))
            os._exit(1)
        await asyncio.sleep(0)
        return {"double": 2 * value, "pid": os.getpid()}

    dataset = raygent.data.map(
        ray.data.range(200, override_num_blocks=4), work, input="id", concurrency=8, actors=2
    )
    table = await run_to_parquet(dataset, tmp_path / "out")
    rows = table.to_pylist()
    assert marker.exists()  # the actor was killed
    assert sorted(r["id"] for r in rows) == list(range(200))  # each row once
    assert {r["result_status"] for r in rows} == {"completed"}
    assert all(json.loads(r["result_data"])["double"] == 2 * r["id"] for r in rows)
    killed = int(marker.read_text())
    row_37 = next(r for r in rows if r["id"] == 37)
    assert json.loads(row_37["result_data"])["pid"] != killed  # rerun by a new process


async def test_a_slow_row_leaves_the_other_places_of_its_actor_busy(tmp_path: Path) -> None:
    concurrency = 8
    state = {"running": 0, "ended": 0, "peak": 0, "peak_stalled": 0}
    released = asyncio.Event()

    async def work(value: int) -> int:
        # Runs in the actor (one copy of `state` there). Row 0 holds its place until 32
        # other rows have ended: its batch cannot end meanwhile.
        state["running"] += 1
        state["peak"] = max(state["peak"], state["running"])
        if state["ended"] >= concurrency:  # past the first wave, while row 0 waits
            state["peak_stalled"] = max(state["peak_stalled"], state["running"])
        try:
            if value == 0:
                await released.wait()
                return state["peak_stalled"] * 100 + state["peak"]
            await asyncio.sleep(0.01)  # a run's latency (not a wait for anything)
            return value
        finally:
            state["running"] -= 1
            if value != 0:
                state["ended"] += 1
                if state["ended"] >= 32:
                    released.set()

    dataset = raygent.data.map(
        ray.data.range(64, override_num_blocks=1),
        work,
        input="id",
        concurrency=concurrency,
        actors=1,
    )
    table = await run_to_parquet(dataset, tmp_path / "out")
    rows = {r["id"]: r for r in table.to_pylist()}
    assert sorted(rows) == list(range(64))
    assert {r["result_status"] for r in rows.values()} == {"completed"}
    peak_stalled, peak = divmod(json.loads(rows[0]["result_data"]), 100)
    assert peak == concurrency  # the bound, never more
    # While row 0's batch could not end, the rows of the other batches kept every
    # other place taken (a batch's finished rows do not hold theirs until it ends).
    assert peak_stalled == concurrency


def test_a_misspelt_run_option_is_refused_before_any_actor() -> None:
    # Issue #44, point 1: nothing is built, nothing runs, the closest name is said.
    bot = raygent.agent(model=OpenAIModel("sim-gpt", base_url="http://127.0.0.1:9/v1", api_key="k"))
    dataset = ray.data.from_items([{"input": "q"}])
    with pytest.raises(raygent.errors.UnknownOptionError, match="did you mean 'output'"):
        raygent.data.map(dataset, bot, run_options={"outptu": dict})

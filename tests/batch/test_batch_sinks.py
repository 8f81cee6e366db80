"""Sinks: JSONL and Parquet written as items end, resume, consistency after cancel and kill."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from batch_support import (
    HANG_FROM,
    fails_on_odd,
    line_count,
    raygent_cli,
    read_jsonl,
    shouting_agent,
    wait_until,
    write_jsonl,
)
from pydantic import BaseModel
from shared_support import driver_env

import raygent
from raygent import AbortController
from raygent._batch import BatchItem, batch
from raygent.testing import FunctionModel


class Answer(BaseModel):
    word: str
    length: int


def keys_once(records: list[dict[str, Any]]) -> Counter[str]:
    counts = Counter(str(r["key"]) for r in records)
    assert all(n == 1 for n in counts.values()), [k for k, n in counts.items() if n > 1]
    return counts


async def test_a_jsonl_sink_records_each_item_and_keeps_nothing_in_memory(tmp_path: Path) -> None:
    def answer(messages: Any, options: Any) -> str:
        word = messages[-1].text
        return json.dumps({"word": word, "length": len(word)})

    agent = raygent.agent(model=FunctionModel(answer), output=Answer)
    sink = tmp_path / "out.jsonl"
    rows = [{"input": w, "id": w} for w in ("alpha", "be", "gamma")]
    result = await batch(agent, rows, sink=sink)
    assert result.ok and result.items == [] and result.data == []
    assert result.report.sink == str(sink) and result.report.succeeded == 3
    records = sorted(read_jsonl(sink), key=lambda r: r["index"])
    assert [r["key"] for r in records] == ["alpha", "be", "gamma"]
    assert records[0]["data"] == {"word": "alpha", "length": 5}  # pydantic as its dump
    assert records[0]["status"] == "completed" and records[0]["attempts"] == 1
    assert records[0]["usage"]["requests"] == 1 and records[0]["error"] is None


async def test_with_a_sink_failures_are_kept_in_memory_as_a_sample(tmp_path: Path) -> None:
    rows = [{"n": n} for n in range(6)]
    result = await batch(fails_on_odd, rows, sink=tmp_path / "out.jsonl")
    assert [i.index for i in result.items] == [1, 3, 5]
    assert all(i.status == "failed" for i in result.items)
    records = read_jsonl(tmp_path / "out.jsonl")
    failed = [r for r in records if r["status"] == "failed"]
    assert failed[0]["error"] == {"type": "ValueError", "message": f"odd: {failed[0]['index']}"}


async def test_resume_skips_completed_items_and_reruns_the_others(tmp_path: Path) -> None:
    sink = tmp_path / "out.jsonl"
    rows = [{"n": n, "key": f"k{n}"} for n in range(6)]
    first = await batch(fails_on_odd, rows, sink=sink)
    assert first.report.failed == 3

    async def all_fine(row: dict[str, Any]) -> int:
        return int(row["n"])

    second = await batch(all_fine, rows, sink=sink, resume=True)
    assert second.report.skipped == 3 and second.report.succeeded == 3
    records = read_jsonl(sink)
    assert keys_once(records) == Counter(f"k{n}" for n in range(6))
    assert all(r["status"] == "completed" for r in records)
    again = await batch(all_fine, rows, sink=sink, resume=True)
    assert again.report.skipped == 6 and again.report.total == 0


async def test_a_torn_last_line_is_dropped_on_resume(tmp_path: Path) -> None:
    sink = tmp_path / "out.jsonl"
    rows = [{"n": n} for n in range(4)]

    async def same(row: dict[str, Any]) -> int:
        return int(row["n"])

    await batch(same, rows[:2], sink=sink)
    with sink.open("a") as out:
        out.write('{"key": 2, "index": 2, "status": "compl')  # a kill mid-write
    result = await batch(same, rows, sink=sink, resume=True)
    assert result.report.skipped == 2 and result.report.succeeded == 2
    records = read_jsonl(sink)  # every line parses again
    assert keys_once(records) == Counter({"0": 1, "1": 1, "2": 1, "3": 1})


async def test_a_parquet_sink_writes_parts_and_resumes(tmp_path: Path) -> None:
    sink = tmp_path / "out.parquet"
    rows = [{"n": n} for n in range(7)]
    first = await batch(fails_on_odd, rows, sink=sink)
    assert first.report.failed == 3 and sink.is_dir()
    table = pq.read_table(sink)
    assert table.num_rows == 7
    assert set(table.column_names) >= {"key", "index", "status", "data", "error", "usage"}

    async def all_fine(row: dict[str, Any]) -> int:
        return int(row["n"]) * 10

    second = await batch(all_fine, rows, sink=sink, resume=True)
    assert second.report.skipped == 4 and second.report.succeeded == 3
    records = pq.read_table(sink).to_pylist()
    assert keys_once(records) == Counter(str(n) for n in range(7))
    by_key = {r["key"]: json.loads(r["data"]) for r in records}
    assert by_key == {str(n): (n if n % 2 == 0 else n * 10) for n in range(7)}


async def test_a_parquet_sink_flushes_in_parts_as_rows_accumulate(tmp_path: Path) -> None:
    from raygent._batch.sinks import ParquetSink

    sink = ParquetSink(tmp_path / "out.parquet", resume=False, rows_per_part=3)
    for index in range(7):
        sink.write(BatchItem(index, index, "completed", data={"i": index}))
    assert len(list(sink.path.glob("part-*.parquet"))) == 2  # 6 rows out, 1 buffered
    sink.close()
    assert pq.read_table(sink.path).num_rows == 7


async def test_a_cancelled_batch_leaves_a_consistent_sink(tmp_path: Path) -> None:
    sink = tmp_path / "out.jsonl"
    controller = AbortController()

    async def hangs_from_three(row: dict[str, Any]) -> int:
        if row["n"] >= 3:
            await asyncio.Event().wait()
        return int(row["n"])

    def on_item(item: BatchItem) -> None:
        if item.index == 2:
            controller.abort("enough")

    rows = [{"n": n} for n in range(50)]
    result = await batch(
        hangs_from_three, rows, sink=sink, concurrency=5, signal=controller.signal, on_item=on_item
    )
    records = read_jsonl(sink)
    keys_once(records)
    statuses = Counter(r["status"] for r in records)
    assert statuses["completed"] == 3 and statuses["cancelled"] == len(records) - 3
    assert result.report.cancelled == statuses["cancelled"] > 0

    async def fine(row: dict[str, Any]) -> int:
        return int(row["n"])

    await batch(fine, rows, sink=sink, resume=True)
    records = read_jsonl(sink)
    assert keys_once(records) == Counter(str(n) for n in range(50))
    assert {r["status"] for r in records} == {"completed"}


async def test_a_sink_that_fails_stops_the_batch_without_raising(tmp_path: Path) -> None:
    class Unserialisable:
        def __str__(self) -> str:
            raise RuntimeError("cannot encode")

    async def bad(row: int) -> Any:
        return Unserialisable()

    result = await batch(bad, range(30), sink=tmp_path / "out.jsonl", concurrency=2)
    assert result.report.stopped is not None and result.report.stopped.why == "sink"
    assert "sink failed" in result.report.stopped.message
    assert result.report.total < 30


def test_bad_sink_paths_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sink must be"):
        asyncio.run(batch(shouting_agent(), ["a"], sink=tmp_path / "out.txt"))


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("stop", "backend"),
    [
        ("SIGKILL", "local"),
        ("SIGINT", "local"),
        ("SIGKILL", "ray"),
        pytest.param("SIGINT", "ray", marks=pytest.mark.slow("starts a fresh Ray, twice")),
    ],
    ids=["SIGKILL-local", "SIGINT-local", "SIGKILL-ray", "SIGINT-ray"],
)
def test_a_driver_stopped_mid_batch_resumes_with_every_item_once(
    tmp_path: Path, stop: str, backend: str, request: pytest.FixtureRequest
) -> None:
    # On "ray" the items run on batch runner actors. A SIGKILLed driver joins the
    # session's Ray (RAY_ADDRESS), as a driver on a cluster does: its job's actors die with
    # it (starting a Ray per run cost ~10 s each). A SIGINTed one starts a Ray of its own:
    # joined to a running Ray, its Ctrl-C has been seen to record no item cancelled, or
    # more than the bound below (for the lead: not yet understood).
    joins = backend == "ray" and stop == "SIGKILL"
    if joins:
        request.getfixturevalue("ray_session")
    env = driver_env(backend) if joins else {**os.environ}
    total = 1000
    source = write_jsonl(tmp_path / "in.jsonl", [{"n": n, "key": f"k{n}"} for n in range(total)])
    sink = tmp_path / "out.jsonl"
    target = "tests.batch.batch_support:double_or_hang"
    args = (target, str(source), "-o", str(sink), "--concurrency", "8", "--no-progress")
    args = (*args, "--backend", backend)
    # Items from 400 on hang in this first run: it cannot finish before it is stopped.
    proc = raygent_cli("batch", *args, env={**env, HANG_FROM: "400"})
    try:
        # SIGKILL lands wherever the writing is; SIGINT once items hang in flight, so
        # that some are sure to end cancelled.
        enough = 100 if stop == "SIGKILL" else 400
        wait_until(lambda: line_count(sink) >= enough, timeout=90, what=f"{enough} results")
        proc.send_signal(getattr(signal, stop))
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    if stop == "SIGINT":
        # Ctrl-C: a clean cancel, reported, and the items in flight recorded cancelled.
        assert proc.returncode == 130, err
        assert "cancelled" in err and "stopped: cancelled: interrupted" in err
        assert any(r["status"] == "cancelled" for r in read_jsonl(sink))
        # It says how to go on: the command as given, with --resume (run below).
        hint = next(line for line in err.splitlines() if line.startswith("to go on with"))
        said = shlex.split(hint.partition(": ")[2])
        assert said == ["raygent", "batch", *args, "--resume"], hint
        # The same command without --resume refuses, before anything runs (issue 37.1).
        before = sink.read_bytes()
        again = raygent_cli("batch", *args, env=env)
        _, refused = again.communicate(timeout=60)
        assert again.returncode == 2 and "--resume" in refused and "--mode" in refused
        assert sink.read_bytes() == before
    else:
        assert proc.returncode == -signal.SIGKILL
    # Unfinished items end cancelled: those in flight, and on Ray those a runner held
    # queued (up to twice its slots).
    held = 8 if backend == "local" else 2 * 8
    assert 100 <= line_count(sink) <= 400 + held

    resumed = raygent_cli("batch", *args, "--resume", env=env)
    _, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    assert "skipped (already done)" in err
    records = read_jsonl(sink)
    assert keys_once(records) == Counter(f"k{n}" for n in range(total))
    assert all(r["status"] == "completed" for r in records)
    assert all(r["data"] == {"double": int(r["key"][1:]) * 2} for r in records)


async def test_a_parquet_part_is_written_within_its_window_even_if_nothing_follows(
    tmp_path: Path,
) -> None:
    # A stalled batch: one row, then nothing; the part still reaches the disk in time.
    from raygent._batch import BatchItem
    from raygent._batch.sinks import ParquetSink

    sink = ParquetSink(tmp_path / "out", resume=False, seconds_per_part=0.05)
    sink.write(BatchItem(index=0, key=0, status="completed", data="a"))
    parts = tmp_path / "out"
    deadline = asyncio.get_running_loop().time() + 5
    while not list(parts.glob("part-*.parquet")):
        assert asyncio.get_running_loop().time() < deadline, "no part written"
        await asyncio.sleep(0.01)
    sink.close()
    assert len(list(parts.glob("part-*.parquet"))) == 1

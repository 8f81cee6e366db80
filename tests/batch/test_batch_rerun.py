"""A re-run never destroys data (issue 37.1): a sink that holds records is written only
as the job says (`resume=True`, `mode="overwrite"`, `mode="append"`); by default the job
is refused with `SinkExistsError` before anything runs. Also the README's bulk example
run twice, each time in a process of its own, as its readers do (its sessions stay
whole), and `raygent batch --mode`."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from batch_support import ROOT, fails_on_odd, raygent_cli, read_jsonl, write_jsonl

import raygent
from raygent import batch
from raygent.cli import main
from raygent.errors import InvalidOptionsError, SinkExistsError
from raygent.stores import Scope, SQLiteStore

SINKS = ("out.jsonl", "out.parquet")


class Counted:
    """n * 10, counting the calls (a refused job makes none)."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, row: dict[str, Any]) -> int:
        self.calls += 1
        return int(row["n"]) * 10


def _rows(sink: Path) -> list[dict[str, Any]]:
    if sink.suffix == ".parquet":
        return list(pq.read_table(sink).to_pylist())
    return read_jsonl(sink)


def _snapshot(sink: Path) -> dict[str, bytes]:
    files = sorted(sink.iterdir()) if sink.is_dir() else [sink]
    return {f.name: f.read_bytes() for f in files}


@pytest.mark.parametrize("name", SINKS)
async def test_a_sink_that_holds_records_is_refused_before_anything_runs(
    tmp_path: Path, name: str
) -> None:
    sink, rows = tmp_path / name, [{"n": n} for n in range(3)]
    await batch(Counted(), rows, sink=sink, progress=False)
    before = _snapshot(sink)
    again = Counted()
    for mode in ({}, {"mode": "error"}):
        with pytest.raises(SinkExistsError) as refused:
            await batch(again, rows[:1], sink=sink, progress=False, **mode)
        said = str(refused.value)
        assert "resume=True" in said and 'mode="overwrite"' in said and 'mode="append"' in said
    assert isinstance(refused.value, InvalidOptionsError) and refused.value.code == (
        "BATCH_SINK_EXISTS"
    )
    assert again.calls == 0 and _snapshot(sink) == before


@pytest.mark.parametrize("name", SINKS)
async def test_an_empty_or_absent_sink_is_simply_written(tmp_path: Path, name: str) -> None:
    sink = tmp_path / name
    if name.endswith(".parquet"):
        sink.mkdir()
    else:
        sink.write_text("\n")
    first = await batch(Counted(), [{"n": 1}], sink=sink, progress=False)
    assert first.ok and [r["data"] for r in _rows(sink)] in ([10], ["10"])
    absent = await batch(Counted(), [{"n": 2}], sink=tmp_path / "new" / name, progress=False)
    assert absent.ok


@pytest.mark.parametrize("name", SINKS)
async def test_overwrite_replaces_a_sink_and_append_adds_a_new_jobs_rows(
    tmp_path: Path, name: str
) -> None:
    sink, rows = tmp_path / name, [{"n": n, "key": f"k{n}"} for n in range(3)]
    await batch(Counted(), rows, sink=sink, progress=False)
    await batch(Counted(), rows[:1], sink=sink, mode="overwrite", progress=False)
    assert [r["key"] for r in _rows(sink)] == ["k0"]
    await batch(Counted(), rows, sink=sink, mode="append", progress=False)
    kept = _rows(sink)
    assert Counter(r["key"] for r in kept) == Counter({"k0": 2, "k1": 1, "k2": 1})
    # Each row names its job: the old job's rows first, then the new job's, each key once.
    jobs = [r["job"] for r in kept]
    assert len(set(jobs)) == 2 and jobs[0] != jobs[1] and len(set(jobs[1:])) == 1


@pytest.mark.parametrize("name", SINKS)
async def test_a_resume_goes_on_with_the_sinks_last_job_only(tmp_path: Path, name: str) -> None:
    sink, rows = tmp_path / name, [{"n": n, "key": f"k{n}"} for n in range(4)]
    await batch(Counted(), rows, sink=sink, progress=False)  # an earlier job: all done
    second = await batch(fails_on_odd, rows, sink=sink, mode="append", progress=False)
    assert second.report.failed == 2
    done = Counted()
    resumed = await batch(done, rows, sink=sink, resume=True, progress=False)
    # The last job's completed items are skipped (not the earlier job's): its two
    # failures run again.
    assert (resumed.report.skipped, resumed.report.succeeded, done.calls) == (2, 2, 2)
    kept = _rows(sink)
    first_job = kept[0]["job"]
    earlier = [r for r in kept if r["job"] == first_job]
    last = [r for r in kept if r["job"] != first_job]
    assert sorted(r["key"] for r in earlier) == ["k0", "k1", "k2", "k3"]
    assert sorted(r["key"] for r in last) == ["k0", "k1", "k2", "k3"]
    assert all(r["status"] == "completed" for r in kept)


async def test_resume_and_a_new_jobs_mode_do_not_go_together(tmp_path: Path) -> None:
    sink = tmp_path / "out.jsonl"
    for mode in ("overwrite", "append"):
        with pytest.raises(InvalidOptionsError, match="resume=True"):
            await batch(Counted(), [{"n": 1}], sink=sink, resume=True, mode=mode)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionsError, match="mode= must be one of"):
        await batch(Counted(), [{"n": 1}], sink=sink, mode="replace")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs sink="):
        await batch(Counted(), [{"n": 1}], mode="append")
    assert not sink.exists()


README_BULK = next(
    block
    for block in re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    if "answers.jsonl" in block
)


def _run_readme_block(folder: Path, code: str) -> subprocess.CompletedProcess[str]:
    script = folder / "bulk.py"
    script.write_text(code)
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=folder,
        env={**_local_env(), "RAYGENT_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _local_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAYGENT_BACKEND"] = "local"
    return env


async def _roles(db: Path, session: str) -> list[str]:
    store = SQLiteStore(str(db))
    try:
        return [m.role for m in await store.load(Scope(session))]
    finally:
        await store.aclose()


@pytest.mark.timeout(240)
async def test_the_readmes_bulk_example_run_twice_keeps_its_sink_and_sessions_whole(
    tmp_path: Path,
) -> None:
    for _ in (1, 2):
        done = await asyncio.to_thread(_run_readme_block, tmp_path, README_BULK)
        assert done.returncode == 0, done.stderr
        assert "3 lines in the sink" in done.stdout
    # The second run's questions are new turns, stored with their answers, in order.
    assert await _roles(tmp_path / "sessions.db", "ada") == ["user", "assistant"] * 4
    assert await _roles(tmp_path / "sessions.db", "bob") == ["user", "assistant"] * 2


@pytest.mark.timeout(240)
async def test_the_readmes_bulk_example_without_a_mode_is_refused_the_second_time(
    tmp_path: Path,
) -> None:
    # As it was before `mode=` (its comment on mode= left out too).
    bare = re.sub(r'mode="\w+", |^#.*\n', "", README_BULK, flags=re.MULTILINE)
    assert "mode=" not in bare
    first = await asyncio.to_thread(_run_readme_block, tmp_path, bare)
    assert first.returncode == 0, first.stderr
    sink = (tmp_path / "answers.jsonl").read_bytes()
    second = await asyncio.to_thread(_run_readme_block, tmp_path, bare)
    assert second.returncode != 0 and "SinkExistsError" in second.stderr
    assert "resume=True" in second.stderr and "mode=" in second.stderr
    assert (tmp_path / "answers.jsonl").read_bytes() == sink  # not truncated
    assert await _roles(tmp_path / "sessions.db", "ada") == ["user", "assistant"] * 2


def test_the_cli_refuses_a_sink_that_holds_records_unless_told_how(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", [{"input": f"hi {n}", "id": n} for n in range(3)])
    sink = tmp_path / "out.jsonl"
    args = ["batch", "batch_support:echo_agent", str(source), "-o", str(sink), "--no-progress"]
    assert main(args) == 0
    before = sink.read_bytes()
    # A user's second run, as a process of its own: refused, the sink as it was.
    proc = raygent_cli(*args[:1], "tests.batch.batch_support:echo_agent", *args[2:])
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "--resume" in err and "--mode overwrite" in err, err
    assert "--mode append" in err and "resume=True" not in err and "mode=" not in err
    assert sink.read_bytes() == before
    assert main([*args, "--mode", "append"]) == 0
    assert [r["key"] for r in read_jsonl(sink)].count(0) == 2 and len(read_jsonl(sink)) == 6
    assert main([*args, "--mode", "overwrite"]) == 0
    assert len(read_jsonl(sink)) == 3
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    assert "3 skipped" in capsys.readouterr().err


def test_a_refused_sink_is_refused_before_an_estimate_pays_for_its_sample(
    tmp_path: Path,
) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", [{"input": "hi", "id": 1}])
    sink = tmp_path / "out.jsonl"
    sink.write_text('{"key": 1, "status": "completed"}\n')
    proc = raygent_cli(
        "batch",
        "tests.batch.batch_support:echo_agent",
        str(source),
        "-o",
        str(sink),
        "--confirm-over",
        "0",
        "--backend",
        "local",
    )
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "estimate" not in err and "--resume" in err, err


async def test_a_cancelled_job_on_a_sink_says_how_to_go_on(tmp_path: Path) -> None:
    controller = raygent.AbortController()
    sink = tmp_path / "out.jsonl"

    async def first_stops_the_job(row: dict[str, Any]) -> int:
        controller.abort("enough")
        await asyncio.Event().wait()  # the rest wait until the batch cancels them
        return 0

    result = await batch(
        first_stops_the_job, [{"n": 1}], sink=sink, signal=controller.signal, progress=False
    )
    assert result.report.stopped is not None
    assert result.report.stopped.why == "cancelled"
    assert result.report.stopped.message.startswith("cancelled: enough")
    assert "resume=True" in result.report.stopped.message
    without = await batch(Counted(), [{"n": 1}], signal=controller.signal, progress=False)
    assert str(without.report.stopped) == "cancelled: enough"  # no sink: nothing to go on with


@pytest.mark.parametrize("name", SINKS)
async def test_a_sink_moved_without_its_job_file_resumes_its_last_job(
    tmp_path: Path, name: str
) -> None:
    sink, rows = tmp_path / name, [{"n": n, "key": f"k{n}"} for n in range(4)]
    await batch(fails_on_odd, rows, sink=sink, progress=False)
    job_file = sink / "_raygent_job" if sink.is_dir() else tmp_path / f"{name}.job"
    job = json.loads(job_file.read_text())["job"]
    job_file.unlink()
    resumed = await batch(Counted(), rows, sink=sink, resume=True, progress=False)
    assert (resumed.report.skipped, resumed.report.succeeded) == (2, 2)
    assert {r["job"] for r in _rows(sink)} == {job}  # the same job, its runs named alike


@pytest.mark.timeout(240)
def test_the_demo_run_twice_in_one_folder_starts_afresh(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    command = [sys.executable, "-m", "raygent", "demo", "--latency-ms", "0", "--items", "4"]
    for _ in (1, 2):
        done = subprocess.run(
            [*command, "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=200,
            env={**_local_env(), "RAYGENT_OFFLINE": "1"},
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    assert len(read_jsonl(out / "results.jsonl")) == 4  # the second run's, whole

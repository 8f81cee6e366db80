"""Which progress bar a batch shows: a widget only in a notebook that has ipywidgets,
else the text bar, with no warning either way; `progress=False` shows none.

The facts (in a notebook? ipywidgets importable?) are arguments of `bar_class`, so the
choice is tested for a notebook without ipywidgets outside one; the facts themselves
are tested against this process."""

from __future__ import annotations

import csv
import importlib
import io
import json
import re
import sys
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tqdm.notebook
import tqdm.std

from raygent import batch
from raygent._batch.progress import Progress, bar_class, has_widgets, in_notebook
from raygent._batch.sources import count_rows


def test_in_a_notebook_without_ipywidgets_the_text_bar_shows_without_a_warning() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bar = bar_class(notebook=True, widgets=False)
        out = io.StringIO()
        shown = bar(total=3, unit="item", desc="batch", file=out)
        shown.update(3)
        shown.close()
    assert bar is tqdm.std.tqdm
    assert caught == []
    assert "3/3" in out.getvalue()


def test_the_widget_only_in_a_notebook_with_ipywidgets() -> None:
    assert bar_class(notebook=True, widgets=True) is tqdm.notebook.tqdm
    assert bar_class(notebook=False, widgets=True) is tqdm.std.tqdm
    assert bar_class(notebook=False, widgets=False) is tqdm.std.tqdm


def test_the_facts_are_read_from_this_process() -> None:
    try:
        importlib.import_module("ipywidgets")
    except ImportError:
        importable = False
    else:
        importable = True
    assert has_widgets() is importable
    assert in_notebook() is ("ipykernel.zmqshell" in sys.modules)


async def test_progress_false_shows_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    async def echo(i: int) -> int:
        return i

    result = await batch(echo, range(3), progress=False)
    assert result.ok
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_the_text_bar_shows_done_failed_retrying_and_throughput(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Outside a notebook with ipywidgets the bar is text: done of total, items/s, and the
    failed / retrying counts (cancelled once there are some)."""
    progress = Progress(enabled=True, total=4)
    progress.update(failed=0, cancelled=0, retrying=1)
    progress.update(failed=1, cancelled=0, retrying=1)
    progress.update(failed=1, cancelled=1, retrying=0)
    progress.close(failed=1, cancelled=1, retrying=0)
    last = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert last.startswith("batch:") and "3/4" in last
    assert "item/s" in last  # throughput
    assert "failed=1, retrying=0, cancelled=1" in last


@pytest.mark.parametrize("kind", ["jsonl", "csv", "parquet"])
async def test_a_file_input_is_counted_so_the_bar_has_a_total_and_an_eta(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [{"n": n, "note": "a,b\nc" if n == 2 else "x"} for n in range(7)]
    path = tmp_path / f"in.{kind}"
    if kind == "jsonl":
        path.write_text("\n".join(json.dumps(r) for r in rows[:3]) + "\n\n" + "".join(
            json.dumps(r) + "\n" for r in rows[3:]
        ))  # fmt: skip
    elif kind == "csv":
        with path.open("w", newline="") as out:
            writer = csv.DictWriter(out, ["n", "note"])
            writer.writeheader()
            writer.writerows(rows)  # row 2 spans two lines, quoted
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    assert count_rows(path) == 7

    async def echo(item: dict[str, object]) -> object:
        return item["n"]

    result = await batch(echo, path, progress=True)
    bar = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert result.report.total == result.report.input_items == 7
    assert "7/7" in bar and "100%" in bar  # a total, hence a percentage and an ETA
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d", bar), bar  # elapsed<remaining


def test_an_input_that_cannot_be_counted_has_no_total(tmp_path: Path) -> None:
    path = tmp_path / "in.ndjson"
    path.write_text('"a"\n')
    assert count_rows(path) == 1
    assert count_rows(tmp_path / "missing.jsonl") is None  # reading it will say why

"""Which progress bar a batch shows: a widget only in a notebook that has ipywidgets,
else the text bar, with no warning either way; `progress=False` shows none.

The facts (in a notebook? ipywidgets importable?) are arguments of `bar_class`, so the
choice is tested for a notebook without ipywidgets outside one; the facts themselves
are tested against this process."""

from __future__ import annotations

import importlib
import io
import sys
import warnings

import pytest
import tqdm.notebook
import tqdm.std

from raygent import batch
from raygent._batch.progress import Progress, bar_class, has_widgets, in_notebook


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

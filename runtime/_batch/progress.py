"""The progress bar of a batch: tqdm, a widget in a notebook that has ipywidgets, else
the text bar (never `tqdm.auto`, which warns "IProgress not found" in a notebook without
ipywidgets)."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from typing import Any

__all__ = ["Progress", "bar_class", "has_widgets", "in_notebook", "wants_progress"]

_POSTFIX_EVERY = 0.25  # seconds between postfix redraws: formatting it per item is costly


def wants_progress(choice: bool | None) -> bool:
    """`progress=None` means: on in a terminal or a notebook, off otherwise (CI, tests,
    pipes)."""
    if choice is not None:
        return choice
    if "ipykernel" in sys.modules:
        return True
    stream = sys.stderr
    return stream is not None and hasattr(stream, "isatty") and stream.isatty()


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel that shows widgets (as `tqdm.autonotebook`
    decides: not the qtconsole or Spyder, whose kernels have no widget area)."""
    if "ipykernel.zmqshell" not in sys.modules:
        return False
    return not any(name == "QT_API" or name.startswith("SPYDER") for name in os.environ)


def has_widgets() -> bool:
    """Whether ipywidgets can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("ipywidgets") is not None
    except (ImportError, ValueError):
        return False


def bar_class(*, notebook: bool, widgets: bool) -> Any:
    """The tqdm bar for these facts: the widget only in a notebook with ipywidgets."""
    if notebook and widgets:
        from tqdm.notebook import tqdm as widget_bar

        return widget_bar
    from tqdm.std import tqdm as text_bar

    return text_bar


class Progress:
    """done (the bar), failed and retrying counts, items/s; a no-op when disabled."""

    def __init__(self, enabled: bool, total: int | None, skipped: int = 0) -> None:
        self._bar: Any = None
        self._last = 0.0
        if enabled:
            bar = bar_class(notebook=in_notebook(), widgets=has_widgets())
            self._bar = bar(total=total, initial=skipped, unit="item", desc="batch")

    def skipped(self, count: int) -> None:
        if self._bar is not None:
            self._bar.update(count)

    def update(self, failed: int, cancelled: int, retrying: int) -> None:
        bar = self._bar
        if bar is None:
            return
        bar.update(1)
        now = time.monotonic()
        if now - self._last >= _POSTFIX_EVERY:
            self._last = now
            bar.set_postfix(_counts(failed, retrying, cancelled), refresh=False)

    def close(self, failed: int, cancelled: int, retrying: int) -> None:
        if self._bar is not None:
            self._bar.set_postfix(_counts(failed, retrying, cancelled))
            self._bar.close()


def _counts(failed: int, retrying: int, cancelled: int) -> dict[str, int]:
    # A dict keeps this order (tqdm sorts keyword postfixes); cancelled only once it counts.
    counts = {"failed": failed, "retrying": retrying}
    if cancelled:
        counts["cancelled"] = cancelled
    return counts

"""The progress bar of a batch: tqdm (`tqdm.auto`, so notebooks get a widget)."""

from __future__ import annotations

import sys
import time
from typing import Any

__all__ = ["Progress", "wants_progress"]

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


class Progress:
    """done (the bar), failed and retrying counts, items/s; a no-op when disabled."""

    def __init__(self, enabled: bool, total: int | None, skipped: int = 0) -> None:
        self._bar: Any = None
        self._last = 0.0
        if enabled:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, initial=skipped, unit="item", desc="batch")

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

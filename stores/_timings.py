"""The timings half every store shares: `BaseTimingStore`, the TimingStore methods.

A timing is a small `TimingSample` under a key (an endpoint and a model); a store keeps
the newest `MAX_TIMINGS` of each key, so a history never grows past a few tens of KB.
`BaseTimingStore` checks the arguments and hands each backend's two primitives
(`_add_timings`, `_timings`) checked values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ._base import BaseStore
from .protocol import TimingSample

__all__ = ["MAX_TIMINGS", "BaseTimingStore", "sample_of", "sample_row"]

MAX_TIMINGS = 1000  # samples kept per key (the newest)
_MAX_KEY = 500  # characters of a key
_MAX_WAY = 32  # characters of a way's name


def sample_row(sample: TimingSample) -> tuple[str, float, bool, float]:
    """A sample as the plain values a backend stores."""
    return (sample.way, sample.seconds, sample.ok, sample.at)


def sample_of(row: Sequence[object]) -> TimingSample:
    """A stored row back as a sample."""
    way, seconds, ok, at = row
    return TimingSample(str(way), float(seconds), bool(ok), float(at))  # type: ignore[arg-type]


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not key or len(key) > _MAX_KEY:
        raise ValueError(f"a timings key is a non-empty string of at most {_MAX_KEY} chars")


def _check(sample: TimingSample) -> None:
    if not isinstance(sample, TimingSample):
        raise TypeError(f"timings are TimingSample values, not {type(sample).__name__}")
    if not isinstance(sample.way, str) or not sample.way or len(sample.way) > _MAX_WAY:
        raise ValueError(f"a timing's way is a non-empty string of at most {_MAX_WAY} chars")
    for value in (sample.seconds, sample.at):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError("a timing's seconds and at are numbers")
        if not math.isfinite(value) or value < 0:
            raise ValueError("a timing's seconds and at are finite and at least 0")


class BaseTimingStore(BaseStore):
    """The TimingStore methods of every store, over the primitives its backend supplies."""

    async def add_timings(self, key: str, samples: Sequence[TimingSample]) -> None:
        _check_key(key)
        listed = list(samples)
        for sample in listed:
            _check(sample)
        if listed:
            await self._add_timings(key, listed[-MAX_TIMINGS:])

    async def timings(self, key: str, limit: int = MAX_TIMINGS) -> list[TimingSample]:
        _check_key(key)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive int, not {limit!r}")
        return await self._timings(key, min(limit, MAX_TIMINGS))

    # -- the backend's primitives ----------------------------------------------------

    async def _add_timings(self, key: str, samples: list[TimingSample]) -> None:
        """Append the samples (oldest first), keeping the newest MAX_TIMINGS of `key`."""
        raise NotImplementedError

    async def _timings(self, key: str, limit: int) -> list[TimingSample]:
        """The newest `limit` samples of `key`, newest first."""
        raise NotImplementedError

"""How long the simulator's provider batches take: `BatchTimes` (a seeded lognormal
time to complete, stalls, a completion window), given for every provider or by
provider."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["PROVIDERS", "BatchTimes", "BatchTimesLike", "times_by_provider"]

PROVIDERS = ("openai", "anthropic", "gemini", "vertex", "bedrock")


@dataclass(frozen=True)
class BatchTimes:
    """How long the simulator's provider batches take, as real ones vary: each batch's
    time to complete is drawn from a lognormal distribution with median
    `median_seconds` and spread `spread` (the standard deviation of its log: 0 gives
    the median every time, 0.5 a 95th percentile ~2.3 times it), seeded by `seed`; a
    share `stall_rate` of batches stall (no line answered until the batch is cancelled
    or its window passes). `window_seconds`: the completion window (24 h at the
    providers, scaled down here): a batch still running then expires, the lines not yet
    answered expired (None: no window). `cancel_seconds`: how long a batch asked to
    cancel goes on answering its lines before it ends (OpenAI's `cancelling` lasts up to
    10 minutes; 0: it ends at once). Times scale down freely: a test's "6 hours" may be
    6 seconds."""

    median_seconds: float = 0.0
    spread: float = 0.0
    stall_rate: float = 0.0
    window_seconds: float | None = None
    seed: int = 0
    cancel_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.median_seconds < 0 or self.spread < 0:
            raise ValueError("median_seconds and spread must be at least 0")
        if not 0.0 <= self.stall_rate <= 1.0:
            raise ValueError("stall_rate must be within [0, 1]")
        if self.window_seconds is not None and self.window_seconds <= 0:
            raise ValueError("window_seconds must be positive (or None)")
        if self.cancel_seconds < 0:
            raise ValueError("cancel_seconds must be at least 0")


BatchTimesLike = BatchTimes | Mapping[str, BatchTimes] | None


def times_by_provider(times: BatchTimesLike) -> dict[str, BatchTimes]:
    """`serve(batch_times=...)` per provider: one `BatchTimes` for every provider, or a
    mapping naming some of ``PROVIDERS`` (ValueError: one it does not know)."""
    if times is None:
        return {}
    if isinstance(times, BatchTimes):
        return dict.fromkeys(PROVIDERS, times)
    unknown = set(times) - set(PROVIDERS)
    if unknown:
        raise ValueError(
            f"batch_times names unknown providers {sorted(unknown)}; known: {', '.join(PROVIDERS)}"
        )
    for value in times.values():
        if not isinstance(value, BatchTimes):
            raise TypeError(f"batch_times values are BatchTimes, not {type(value).__name__}")
    return dict(times)

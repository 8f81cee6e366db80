"""Batch: `raygent.batch` runs an agent (or any async callable) over many items.

call          `batch`, `batch_sync`, `BatchOptions`, `BatchResult`: reading, recording
engine        the in-flight core: attempts in flight, retries, each item ended once
exec          what a batch runs: items into jobs, one attempt of the executable
sources       where items come from (lists, iterables, JSONL / CSV / Parquet, datasets)
sinks         where results go (JSONL, Parquet), and what `resume` skips
retry         `Retry`; progress: the bar; report: `BatchReport`
cli           `raygent batch MODULE:AGENT INPUT -o OUTPUT`

A private name: `raygent.batch` is the public function, which a subpackage would shadow.
May import the base, seams and backend, agents (what it runs) and observe. The Ray batch
runners (raygent.actors) run engine's core; this package reaches them only through the
backend (and cli, through importlib, to ship a target by value on Ray).
"""

from .call import (
    BatchItem,
    BatchOptions,
    BatchReport,
    BatchResult,
    InputError,
    Retry,
    batch,
    batch_sync,
)

__all__ = [
    "BatchItem",
    "BatchOptions",
    "BatchReport",
    "BatchResult",
    "InputError",
    "Retry",
    "batch",
    "batch_sync",
]

"""Where batch items come from, read lazily: nothing is materialised.

A list or any iterable (a generator is consumed as slots free up), an async iterable,
a JSONL / CSV / Parquet path (a Parquet directory too: its parts in name order), or a
dataset with `iter_rows()` (a Ray Dataset, duck-typed so the core never imports Ray).
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Callable,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sized,
)
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from ..seams.batch import Feed, Job
from .exec import InputError, Unreadable

__all__ = ["Source", "count_rows", "feed", "open_items"]

_CHUNK = 256  # rows a dataset hands over per thread hop


@dataclass
class Source:
    """The items as an iterator; `total` when known up front; `owned` if we opened it
    (then we close it)."""

    rows: Iterator[Any] | AsyncIterator[Any]
    total: int | None
    owned: bool
    # A file's rows, counted up front when that is cheap (`count_rows`): a progress
    # total and the report's "of N" (not `total`, which promises a list's every slot).
    counted: int | None = None

    @property
    def size(self) -> int | None:
        """How many items the input holds, when known before reading it."""
        return self.total if self.total is not None else self.counted

    async def aclose(self) -> None:
        """Close what we opened (files, a dataset's reader); the caller's own iterators
        are left as they are."""
        if not self.owned:
            return
        if isinstance(self.rows, AsyncGenerator):
            await self.rows.aclose()
        elif isinstance(self.rows, Generator):
            self.rows.close()


def open_items(items: Any) -> Source:
    """Open `items`; a bad path or type raises here, before anything runs."""
    if isinstance(items, (str, os.PathLike)):
        path = Path(items)
        return Source(_read_path(path), None, True, counted=count_rows(path))
    if isinstance(items, Mapping):
        raise TypeError("batch items must be a list, an iterable, a path or a dataset, not a dict")
    iter_rows = getattr(items, "iter_rows", None)
    if callable(iter_rows):
        return Source(_in_thread(iter_rows()), None, True)
    if isinstance(items, AsyncIterable):
        return Source(aiter(items), None, False)
    if isinstance(items, Iterable):
        total = len(items) if isinstance(items, Sized) else None
        return Source(iter(items), total, False)
    raise TypeError(f"batch items must be iterable, not {type(items).__name__}")


def feed(
    source: Source, make: Callable[[int, Any], Job], skip: Callable[[Job], bool] | None
) -> Feed:
    """The jobs of `source`, indexed in order. Jobs `skip` accepts are left out (resume).
    If the source raises, the next index becomes a failed job and the feed ends."""
    if isinstance(source.rows, AsyncIterator):
        return _async_feed(source.rows, make, skip)
    return _sync_feed(source.rows, make, skip)


def _sync_feed(
    rows: Iterator[Any], make: Callable[[int, Any], Job], skip: Callable[[Job], bool] | None
) -> Iterator[Job]:
    index = 0
    while True:
        try:
            raw = next(rows)
        except StopIteration:
            return
        except Exception as exc:
            yield Job(index, index, error=_input_failed(index, exc))
            return
        job = make(index, raw)
        index += 1
        if skip is None or not skip(job):
            yield job


async def _async_feed(
    rows: AsyncIterator[Any], make: Callable[[int, Any], Job], skip: Callable[[Job], bool] | None
) -> AsyncIterator[Job]:
    index = 0
    while True:
        try:
            raw = await anext(rows)
        except StopAsyncIteration:
            return
        except Exception as exc:
            yield Job(index, index, error=_input_failed(index, exc))
            return
        job = make(index, raw)
        index += 1
        if skip is None or not skip(job):
            yield job


async def _in_thread(rows: Iterable[Any]) -> AsyncIterator[Any]:
    # A dataset's iterator may block for a while (fetching a block from the cluster):
    # pull chunks on a thread so that the event loop keeps every slot busy meanwhile.
    iterator = iter(rows)
    while True:
        chunk = await asyncio.to_thread(lambda: list(islice(iterator, _CHUNK)))
        if not chunk:
            return
        for row in chunk:
            yield row


def _read_path(path: Path) -> Iterator[Any]:
    if not path.exists():
        raise FileNotFoundError(f"no such input: {path}")
    suffix = path.suffix.lower()
    if path.is_dir() or suffix == ".parquet":
        return _parquet_rows(path)
    if suffix in (".jsonl", ".ndjson"):
        return _jsonl_rows(path)
    if suffix == ".csv":
        return _csv_rows(path)
    raise ValueError(f"cannot read {path}: the input must be .jsonl, .ndjson, .csv or .parquet")


def _jsonl_rows(path: Path) -> Iterator[Any]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except ValueError as exc:
                yield Unreadable(InputError(f"{path.name} line {number} is not JSON: {exc}"))


def _csv_rows(path: Path) -> Iterator[Any]:
    with path.open(encoding="utf-8", newline="") as rows:
        yield from csv.DictReader(rows, restkey="_extra")


def _parquet_rows(path: Path) -> Iterator[Any]:
    import pyarrow.parquet as pq

    parts = sorted(p for p in path.glob("*.parquet") if p.is_file()) if path.is_dir() else [path]
    for part in parts:
        with pq.ParquetFile(part) as table:
            for chunk in table.iter_batches(batch_size=1024):
                yield from chunk.to_pylist()


_COUNT_JSONL_BYTES = 512 * 1024 * 1024  # counted under a second or two; larger: unknown
_COUNT_CSV_BYTES = 64 * 1024 * 1024  # a CSV row may span lines: its reader counts, slower


def count_rows(path: Path) -> int | None:
    """The rows a file input holds, when that is cheap to know: a JSONL file's non-blank
    lines, a CSV file's records, a Parquet file's (or directory's) metadata. None when it
    is not (too large, unreadable: reading it will say why)."""
    try:
        suffix = path.suffix.lower()
        if path.is_dir() or suffix == ".parquet":
            import pyarrow.parquet as pq

            parts = sorted(p for p in path.glob("*.parquet") if p.is_file())
            found: int = sum(pq.ParquetFile(p).metadata.num_rows for p in (parts or [path]))
            return found
        size = path.stat().st_size
        if suffix in (".jsonl", ".ndjson") and size <= _COUNT_JSONL_BYTES:
            with path.open("rb") as lines:
                return sum(1 for line in lines if line.strip())
        if suffix == ".csv" and size <= _COUNT_CSV_BYTES:
            with path.open(encoding="utf-8", newline="") as rows:
                return max(0, sum(1 for row in csv.reader(rows) if row) - 1)  # less the header
    except Exception:
        return None
    return None


def _input_failed(index: int, exc: Exception) -> InputError:
    error = InputError(
        f"reading the items failed after {index}: {type(exc).__name__}: {exc}", fatal=True
    )
    error.__cause__ = exc
    return error

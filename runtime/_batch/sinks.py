"""Where batch results go as they complete: a JSONL file or a Parquet directory.

Both stay consistent when the driver is killed at any moment, and both resume:

- JSONL: one line per item, written by a single unbuffered `write` (so a kill leaves at
  most one torn last line, in the OS's hands, not a buffer's). On resume a torn or
  unreadable line is dropped.
- Parquet: a directory of part files (`part-000001-….parquet`), each written to a
  temporary name and renamed into place, so every part present is whole. A part is
  written at 5,000 rows or 10 s after its first row, whichever comes first (a timer on
  the batch's loop, so a stalled batch writes too); a kill loses at most the rows still
  buffered, and those items simply run again on resume. (A single Parquet file is
  unreadable until its footer is written: one kill would lose it all.)

Each row names the job that wrote it (`job`; see `sink_job`). Resume goes on with the
sink's last job: it keeps that job's completed items and drops the records of its failed
and cancelled ones (which run again), so the job's rows end with each key once; the rows
of earlier jobs (`mode="append"`) stay as they are. Keys compare as text.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from .. import errors
from ..seams.batch import EMPTY_USAGE, BatchItem
from .report import tool_errors_of
from .sink_job import SinkJob, job_of_row, write_job

__all__ = ["JsonlSink", "ParquetSink", "Sink", "key_token", "open_sink", "record_of"]

_PART_ROWS = 5000
_PART_SECONDS = 10.0
_EMPTY_DUMP = EMPTY_USAGE.model_dump(mode="json")


class Sink(Protocol):
    path: Path
    done: set[str]
    """Keys of the completed items found on resume."""

    def write(self, item: BatchItem) -> None: ...

    def close(self) -> None: ...


def open_sink(job: SinkJob) -> Sink:
    """The sink `job` checked (`sink_job`), opened for the job (its id kept beside it)."""
    if job.kind == "jsonl":
        sink: Sink = JsonlSink(job.path, job.resume, append=job.append, job=job.job)
    else:
        sink = ParquetSink(job.path, job.resume, append=job.append, job=job.job)
    write_job(job)
    return sink


def key_token(key: Any) -> str:
    return key if isinstance(key, str) else json.dumps(key, default=_default, sort_keys=True)


def record_of(item: BatchItem) -> dict[str, Any]:
    """An item as the sink records it (JSON-ready; pydantic data as its dump)."""
    text = getattr(item.result, "text", None)
    return {
        "key": item.key,
        "index": item.index,
        "status": item.status,
        "data": _plain(item.data),
        "text": text if isinstance(text, str) else None,
        "error": error_dict(item.error),
        "attempts": item.attempts,
        "tool_errors": tool_errors_of(item),
        "usage": _EMPTY_DUMP if item.usage is EMPTY_USAGE else item.usage.model_dump(mode="json"),
    }


def error_dict(error: BaseException | None) -> dict[str, Any] | None:
    if error is None:
        return None
    return errors.error_dict(error)


def dumps(value: Any) -> str:
    return json.dumps(value, default=_default, ensure_ascii=False)


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value


def _default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


class JsonlSink:
    """`append`: a new job's rows go after the old ones (else a new job truncates);
    `job`: the id each row names (see `sink_job`)."""

    def __init__(self, path: Path, resume: bool, *, append: bool = False, job: str = "") -> None:
        self.path = path
        self.job = job
        self.done: set[str] = _resume_jsonl(path, job) if resume and path.exists() else set()
        path.parent.mkdir(parents=True, exist_ok=True)
        keep = resume or append
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if keep else os.O_TRUNC)
        self._fd: int | None = os.open(path, flags, 0o644)
        if append and not resume and _torn(path):
            # The new rows start on lines of their own (resume drops the torn one).
            os.write(self._fd, b"\n")

    def write(self, item: BatchItem) -> None:
        assert self._fd is not None, "the sink is closed"
        record = record_of(item)  # a dict of its own: tagged in place
        record["job"] = self.job or None
        line = memoryview((dumps(record) + "\n").encode("utf-8"))
        while line:  # a regular file takes it in one write; loop for the odd short write
            line = line[os.write(self._fd, line) :]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _torn(path: Path) -> bool:
    """Whether the file's last line has no end (a kill tore it)."""
    with path.open("rb") as file:
        size = file.seek(0, os.SEEK_END)
        if not size:
            return False
        file.seek(size - 1)
        return file.read(1) != b"\n"


def _resume_jsonl(path: Path, job: str) -> set[str]:
    """The keys `job` completed; its other rows (and unreadable lines) are dropped."""
    done: set[str] = set()
    clean = True
    for record in _jsonl_records(path):
        if record is not None and job_of_row(record) != job:
            continue  # an earlier job's row: kept as it is
        if record is not None and record.get("status") == "completed":
            done.add(key_token(record.get("key")))
        else:
            clean = False
    if not clean:
        # Keep the completed lines only: the others run again and are written anew.
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as out:
            for record in _jsonl_records(path):
                if record is not None and (
                    record.get("status") == "completed" or job_of_row(record) != job
                ):
                    out.write(dumps(record) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    return done


def _jsonl_records(path: Path) -> Iterator[dict[str, Any] | None]:
    """Each whole line's record; None for a line that is torn or not a record."""
    with path.open("rb") as lines:
        for line in lines:
            if not line.endswith(b"\n"):
                yield None  # torn by a kill mid-write
                return
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                yield None
                continue
            yield record if isinstance(record, dict) and "key" in record else None


class ParquetSink:
    """A directory of Parquet parts; rows are buffered up to `rows_per_part` rows or
    `seconds_per_part` seconds, then written as one part. `append` and `job`: as for
    `JsonlSink`."""

    def __init__(
        self,
        path: Path,
        resume: bool,
        *,
        append: bool = False,
        job: str = "",
        rows_per_part: int = _PART_ROWS,
        seconds_per_part: float = _PART_SECONDS,
    ) -> None:
        import pyarrow as pa

        self.path = path
        self.job = job
        self._rows_per_part = rows_per_part
        self._seconds_per_part = seconds_per_part
        self._schema = pa.schema(
            [
                ("key", pa.string()),
                ("index", pa.int64()),
                ("status", pa.string()),
                ("data", pa.string()),
                ("text", pa.string()),
                ("error", pa.string()),
                ("attempts", pa.int64()),
                ("usage", pa.string()),
                ("tool_errors", pa.int64()),
                ("job", pa.string()),
            ]
        )
        if path.exists() and not path.is_dir():
            if resume:
                raise ValueError(f"{path} is a file; a Parquet sink is a directory of parts")
            path.unlink()
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.tmp"):
            stale.unlink()  # a part a kill interrupted: its rows were never recorded
        if not resume and not append:
            for part in self._parts():
                part.unlink()
        self.done = self._resume() if resume else set()
        self._seq = len(self._parts())
        self._buffer: list[dict[str, Any]] = []
        self._since = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def write(self, item: BatchItem) -> None:
        record = record_of(item)
        row = {
            **record,
            "key": key_token(item.key),
            "data": None if item.data is None else dumps(record["data"]),
            "error": None if record["error"] is None else dumps(record["error"]),
            "usage": dumps(record["usage"]),
            "job": self.job or None,
        }
        if not self._buffer:
            self._since = time.monotonic()
            self._due_in(self._seconds_per_part)
        self._buffer.append(row)
        full = len(self._buffer) >= self._rows_per_part
        if full or time.monotonic() - self._since >= self._seconds_per_part:
            self.flush()

    def _due_in(self, seconds: float) -> None:
        """Flush by then even if no other result comes (a stalled batch): a row reaches
        the disk within `seconds_per_part` of being recorded, whatever follows."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # written from no loop: the next write or close flushes
        self._timer = loop.call_later(seconds, self._when_due)

    def _when_due(self) -> None:
        self._timer = None
        if self._buffer:
            self.flush()

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._buffer:
            return
        import pyarrow as pa

        table = pa.Table.from_pylist(self._buffer, schema=self._schema)
        self._seq += 1
        self._write_part(table, self.path / f"part-{self._seq:06d}-{uuid.uuid4().hex[:8]}.parquet")
        self._buffer = []

    def close(self) -> None:
        self.flush()

    def _parts(self) -> list[Path]:
        return sorted(self.path.glob("part-*.parquet"))

    def _write_part(self, table: Any, final: Path) -> None:
        import pyarrow.parquet as pq

        tmp = final.with_name(final.name + ".tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, final)

    def _resume(self) -> set[str]:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        done: set[str] = set()
        for part in self._parts():
            table = pq.read_table(part)
            completed = pc.equal(table["status"], "completed")
            if "job" in table.column_names:
                jobs = pc.fill_null(table["job"], "")
            else:  # a part from before jobs had ids
                jobs = pa.array([""] * table.num_rows, pa.string())
            theirs = pc.not_equal(jobs, self.job)  # an earlier job's rows: kept as they are
            done.update(table.filter(pc.and_(completed, pc.invert(theirs)))["key"].to_pylist())
            kept = table.filter(pc.or_(completed, theirs))
            if kept.num_rows < table.num_rows:
                # Drop the failed and cancelled rows: those items run again.
                if kept.num_rows:
                    self._write_part(kept, part)
                else:
                    part.unlink()
        return done

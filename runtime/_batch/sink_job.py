"""A job's sink before anything runs: whether the job may write it (`mode=`), and the
job's id, which names its items' runs on sessions (and durable runs).

A sink that holds records is written only when the batch says how: `resume=True` goes on
with the job that wrote it, `mode="overwrite"` replaces it, `mode="append"` adds a new
job's rows after the old ones. The default, `mode="error"`, refuses (`SinkExistsError`)
before anything is sent; an empty or absent sink is simply written.

Every new job gets an id of its own, kept beside the sink (JSONL: `<sink>.job`; Parquet:
`_raygent_job` in the directory, a name Parquet readers skip) and in each of its rows
(`job`). A resumed job reads it back, so its items' runs keep their ids and what an
interrupted item stored in its session is continued, not stored twice; a new job's
items are new runs, new turns in their sessions, whatever keys an earlier job used.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias, get_args

from ..errors import InvalidOptionsError, SinkExistsError
from ..models._names import PYTHON, Spelling

__all__ = ["SinkJob", "SinkMode", "job_of_row", "sink_job", "write_job"]

SinkMode: TypeAlias = Literal["error", "overwrite", "append"]
MODES: tuple[str, ...] = get_args(SinkMode)
PARQUET_JOB_FILE = "_raygent_job"
_SCAN = 1 << 16


@dataclass(frozen=True)
class SinkJob:
    """A sink, checked, and the job that writes it.

    `job` tags the job's rows ("" for a job from before jobs had ids: its rows have no
    `job`); `namespace` names its items' runs; `fresh`: the id is new (written beside
    the sink when the sink is opened)."""

    path: Path
    kind: Literal["jsonl", "parquet"]
    resume: bool
    mode: SinkMode
    job: str
    namespace: str
    fresh: bool

    @property
    def append(self) -> bool:
        return self.mode == "append"


def job_of_row(row: dict[str, Any]) -> str:
    """The job that wrote a row ("" for a row from before jobs had ids)."""
    return str(row.get("job") or "")


def sink_job(
    sink: str | os.PathLike[str],
    resume: bool,
    mode: SinkMode | None = None,
    *,
    spelling: Spelling = PYTHON,
) -> SinkJob:
    """Check the sink for this job (a bad path or mode raises ValueError or
    InvalidOptionsError, a sink that holds records and no `resume` / `mode` raises
    SinkExistsError; each names the options as `spelling`'s reader writes them), and
    name the job."""
    path = Path(sink)
    kind = _kind(path)
    say = spelling.option
    if mode is not None and mode not in MODES:
        raise InvalidOptionsError(f"{say('mode')} must be one of {', '.join(MODES)}, not {mode!r}")
    if resume and mode not in (None, "error"):
        raise InvalidOptionsError(
            f"{say('resume', True)} goes on with the job that wrote {path}; "
            f"{say('mode', mode)} starts a new job: give one or the other"
        )
    chosen: SinkMode = mode or "error"
    holds = _holds_records(path, kind)
    if resume:
        known = _read_job(path, kind) or _last_rows_job(path, kind)
        if known is not None:
            return SinkJob(path, kind, True, chosen, known, known, fresh=False)
        if holds:  # written before jobs had ids: its runs were named by the sink's path
            return SinkJob(path, kind, True, chosen, "", _path_namespace(path), fresh=False)
    elif holds and chosen == "error":
        raise SinkExistsError(
            f"{path} holds the results of an earlier job: pass {say('resume', True)} to go on"
            f" with that job, or {say('mode', 'overwrite')} to replace them or"
            f" {say('mode', 'append')} to add this job's after them",
            sink=str(path),
        )
    if kind == "parquet" and chosen == "append" and path.is_file():
        raise InvalidOptionsError(
            f"cannot {say('mode', 'append')} to {path}: a Parquet sink is a directory"
        )
    job = uuid.uuid4().hex[:12]
    return SinkJob(path, kind, resume, chosen, job, job, fresh=True)


def write_job(sink: SinkJob) -> None:
    """Keep a new job's id beside its sink (atomically), before any row is written."""
    if not sink.fresh:
        return
    target = _job_file(sink.path, sink.kind)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps({"job": sink.job}) + "\n", encoding="utf-8")
    os.replace(tmp, target)


def _kind(path: Path) -> Literal["jsonl", "parquet"]:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".parquet":
        return "parquet"
    raise ValueError(f"cannot write {path}: the sink must be .jsonl, .ndjson or .parquet")


def _job_file(path: Path, kind: str) -> Path:
    return path / PARQUET_JOB_FILE if kind == "parquet" else path.with_name(path.name + ".job")


def _read_job(path: Path, kind: str) -> str | None:
    try:
        value = json.loads(_job_file(path, kind).read_text(encoding="utf-8")).get("job")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value else None


def _last_rows_job(path: Path, kind: str) -> str | None:
    """The job of the sink's last row (the sink moved without the file beside it)."""
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            parts = sorted(path.glob("part-*.parquet"))
            table = pq.read_table(parts[-1], columns=["job"]) if parts else None
            value = table["job"][-1].as_py() if table is not None and table.num_rows else None
        else:
            with path.open("rb") as lines:
                whole = [line for line in lines if line.endswith(b"\n") and line.strip()]
            value = json.loads(whole[-1]).get("job") if whole else None
    except (OSError, ValueError, KeyError, AttributeError):
        return None
    return value if isinstance(value, str) and value else None


def _path_namespace(path: Path) -> str:
    return hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:12]


def _holds_records(path: Path, kind: str) -> bool:
    if kind == "parquet" and path.is_dir():
        return any(path.glob("part-*.parquet"))
    if not path.is_file():
        return False
    if kind == "parquet":
        return path.stat().st_size > 0
    with path.open("rb") as lines:  # blank lines are no records
        while chunk := lines.read(_SCAN):
            if chunk.strip():
                return True
    return False

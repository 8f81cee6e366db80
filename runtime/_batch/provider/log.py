"""The ledger of a job's provider batches: what was sent, where, and what came back.

Beside the sink (`<sink>.provider-batches/`), so a driver killed while batches are out
finds them again when the job is resumed: `batches.jsonl` gets a line before a batch is
submitted (its tag and lines), one when the provider has named it, one when it ended
(after its results, the provider's own JSONL, are written to `results/<id>.jsonl`).
Each line is flushed and synced before the step it records is taken. Without a sink the
ledger lives in memory (the job cannot be resumed anyway).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic_core

__all__ = ["SentBatch", "SubmissionLog"]


@dataclass(slots=True)
class SentBatch:
    """A batch the ledger knows of."""

    tag: str
    provider: str
    base_url: str
    endpoint: str
    lines: list[str]
    at: float
    id: str | None = None
    status: str | None = None  # set once it ended
    failure: str | None = None
    results: bytes | None = None  # its results, once ended (read back on resume)
    extra: dict[str, Any] = field(default_factory=dict)


class SubmissionLog:
    """The batches of one job, in memory and (with a folder) on disk."""

    def __init__(self, folder: Path | None, *, resume: bool) -> None:
        self.folder = folder
        self.batches: dict[str, SentBatch] = {}
        self._file: Any = None
        if folder is None:
            return
        if not resume and folder.exists():
            shutil.rmtree(folder)
        (folder / "results").mkdir(parents=True, exist_ok=True)
        log = folder / "batches.jsonl"
        cut = False
        if log.exists():
            raw = log.read_bytes()
            self._load(raw)
            cut = bool(raw) and not raw.endswith(b"\n")
        self._file = open(log, "ab")  # noqa: SIM115 (kept open for the job)
        if cut:  # a line the kill cut off: the next record starts on a line of its own
            self._file.write(b"\n")

    def _load(self, content: bytes) -> None:
        by_id: dict[str, SentBatch] = {}
        for raw in content.splitlines():
            try:
                record = pydantic_core.from_json(raw)
            except ValueError:
                continue  # a line cut off by the kill: the step it announced never ran
            if "submit" in record:
                sent = SentBatch(
                    record["submit"],
                    record["provider"],
                    record["base_url"],
                    record["endpoint"],
                    list(record["lines"]),
                    float(record["at"]),
                )
                self.batches[sent.tag] = sent
            elif "submitted" in record and record["submitted"] in self.batches:
                sent = self.batches[record["submitted"]]
                sent.id = record["id"]
                by_id[sent.id] = sent
            elif "ended" in record and record["ended"] in by_id:
                sent = by_id[record["ended"]]
                path = self._results_path(sent.id or "")
                if path is not None and path.exists():
                    sent.results = path.read_bytes()
                    sent.status = record["status"]
                    sent.failure = record.get("failure")

    def _results_path(self, batch_id: str) -> Path | None:
        # A batch id may be a resource name ("batches/123", Vertex's "projects/.../123"):
        # one file name all the same.
        name = batch_id.replace("/", "__")
        return None if self.folder is None else self.folder / "results" / f"{name}.jsonl"

    def _write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            return
        self._file.write(pydantic_core.to_json(record) + b"\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def submitting(self, sent: SentBatch) -> None:
        """Before a batch is submitted: its tag and lines."""
        self.batches[sent.tag] = sent
        self._write(
            {
                "submit": sent.tag,
                "provider": sent.provider,
                "base_url": sent.base_url,
                "endpoint": sent.endpoint,
                "lines": sent.lines,
                "at": sent.at,
            }
        )

    def submitted(self, sent: SentBatch, batch_id: str) -> None:
        sent.id = batch_id
        self._write({"submitted": sent.tag, "id": batch_id})

    def ended(self, sent: SentBatch, status: str, results: bytes, failure: str | None) -> None:
        """A batch ended: its results are kept before the record that says so."""
        path = self._results_path(sent.id or "")
        if path is not None:
            tmp = path.with_suffix(".part")
            tmp.write_bytes(results)
            os.replace(tmp, path)
        sent.status, sent.results, sent.failure = status, results, failure
        self._write({"ended": sent.id, "status": status, "failure": failure})

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

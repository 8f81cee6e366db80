"""Counters and recorded requests, safe to read from any thread."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_REDACTED = "[redacted]"
_SECRET_HEADERS = frozenset(
    {"authorization", "x-api-key", "api-key", "proxy-authorization", "cookie", "x-goog-api-key"}
)


class SimStats(BaseModel):
    """A snapshot of the simulator's counters.

    ``in_flight``/``peak_in_flight`` count admitted chat requests (past auth, parsing and
    the rate caps); ``by_status`` counts finished responses (a stream as its 200);
    ``disconnects`` counts requests whose client went away before the response was
    finished."""

    model_config = ConfigDict(frozen=True)

    requests: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    by_status: dict[int, int] = Field(default_factory=dict)
    disconnects: int = 0
    streams: int = 0
    by_api: dict[str, int] = Field(default_factory=dict)
    faults: int = 0
    batch_calls: int = 0
    batch_lines: int = 0


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A request as received: auth header values are replaced by ``"[redacted]"``;
    ``body`` is the parsed JSON (``None`` if it did not parse)."""

    api: str | None
    method: str
    path: str
    headers: dict[str, str]
    body: Any


def redact_headers(headers: Any) -> dict[str, str]:
    """Lower-cased header names; values of credential headers replaced."""
    return {k.lower(): _REDACTED if k.lower() in _SECRET_HEADERS else v for k, v in headers.items()}


class StatsRecorder:
    """Mutated on the server loop, read from anywhere: every access holds one lock."""

    def __init__(self, max_records: int = 1000) -> None:
        self._lock = threading.Lock()
        self._records: deque[RecordedRequest] = deque(maxlen=max_records)
        self._zero()
        self._in_flight = 0

    def _zero(self) -> None:
        self._requests = 0
        self._peak = 0
        self._by_status: dict[int, int] = {}
        self._disconnects = 0
        self._streams = 0
        self._by_api: dict[str, int] = {}
        self._faults = 0
        self._batch_calls = 0
        self._batch_lines = 0

    def received(self, record: RecordedRequest, *, batch_call: bool = False) -> None:
        with self._lock:
            self._requests += 1
            self._batch_calls += batch_call
            if record.api is not None:
                self._by_api[record.api] = self._by_api.get(record.api, 0) + 1
            self._records.append(record)

    def try_admit(self, cap: int | None) -> bool:
        """Count one more request in flight unless ``cap`` are already in flight."""
        with self._lock:
            if cap is not None and self._in_flight >= cap:
                return False
            self._in_flight += 1
            self._peak = max(self._peak, self._in_flight)
            return True

    def released(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def finished(self, status: int) -> None:
        with self._lock:
            self._by_status[status] = self._by_status.get(status, 0) + 1

    def disconnected(self) -> None:
        with self._lock:
            self._disconnects += 1

    def stream_started(self) -> None:
        with self._lock:
            self._streams += 1

    def fault(self) -> None:
        with self._lock:
            self._faults += 1

    def batch_line(self) -> None:
        with self._lock:
            self._batch_lines += 1

    def snapshot(self) -> SimStats:
        with self._lock:
            return SimStats(
                requests=self._requests,
                in_flight=self._in_flight,
                peak_in_flight=self._peak,
                by_status=dict(self._by_status),
                disconnects=self._disconnects,
                streams=self._streams,
                by_api=dict(self._by_api),
                faults=self._faults,
                batch_calls=self._batch_calls,
                batch_lines=self._batch_lines,
            )

    def records(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._records)

    def reset(self) -> None:
        """Zero the counters and forget the records; the in-flight gauge stays live."""
        with self._lock:
            self._zero()
            self._peak = self._in_flight
            self._records.clear()

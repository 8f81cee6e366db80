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
    finished.

    Rates: ``rate_limited`` counts 429s by cause (``requests``, ``tokens``,
    ``input_tokens``, ``output_tokens`` past a rate limit; ``concurrency`` past
    ``max_concurrency``). ``admitted_*`` count admitted chat requests and what they were
    charged (tokens: prompt plus ``max_tokens``; input: prompt; output: ``max_tokens``).
    ``peak_requests_per_second`` / ``peak_tokens_per_second``: the most admitted (and
    their tokens) within any one second, over all keys and models."""

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
    rate_limited: dict[str, int] = Field(default_factory=dict)
    admitted_requests: int = 0
    admitted_tokens: int = 0
    admitted_input_tokens: int = 0
    admitted_output_tokens: int = 0
    peak_requests_per_second: int = 0
    peak_tokens_per_second: int = 0


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
        self._rate_limited: dict[str, int] = {}
        self._second = _RollingSecond()

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

    def rate_limited(self, cause: str) -> None:
        with self._lock:
            self._rate_limited[cause] = self._rate_limited.get(cause, 0) + 1

    def admitted(self, now: float, input_tokens: int, max_tokens: int) -> None:
        """One chat request admitted at `now` (monotonic seconds)."""
        with self._lock:
            self._second.add(now, input_tokens, max_tokens)

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
                rate_limited=dict(self._rate_limited),
                **self._second.counts(),
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


class _RollingSecond:
    """Admissions in total and the most within any one second (a sliding window)."""

    def __init__(self) -> None:
        self._window: deque[tuple[float, int]] = deque()
        self._window_tokens = 0
        self._requests = 0
        self._input = 0
        self._output = 0
        self._peak_requests = 0
        self._peak_tokens = 0

    def add(self, now: float, input_tokens: int, max_tokens: int) -> None:
        tokens = input_tokens + max_tokens
        self._requests += 1
        self._input += input_tokens
        self._output += max_tokens
        window = self._window
        window.append((now, tokens))
        self._window_tokens += tokens
        while window[0][0] <= now - 1.0:
            self._window_tokens -= window.popleft()[1]
        self._peak_requests = max(self._peak_requests, len(window))
        self._peak_tokens = max(self._peak_tokens, self._window_tokens)

    def counts(self) -> dict[str, int]:
        return {
            "admitted_requests": self._requests,
            "admitted_tokens": self._input + self._output,
            "admitted_input_tokens": self._input,
            "admitted_output_tokens": self._output,
            "peak_requests_per_second": self._peak_requests,
            "peak_tokens_per_second": self._peak_tokens,
        }

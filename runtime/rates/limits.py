"""What a rate limit is, and what a reply's headers say of one (part of the base: the
model contract's `ModelResponse` and a 429's `RateLimitError` carry a `RateReading`).

Providers count requests and tokens per minute and enforce them over shorter periods;
their replies say where a key stands:

- OpenAI: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, the reset a duration
  (`"1s"`, `"6m0s"`, `"12ms"`, `"1h2m3.5s"`);
- Anthropic: `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,
  remaining,reset}`, the reset an RFC 3339 time (`tokens` the most restrictive of the
  token limits in effect: read only where no input or output limit is stated);
- both: `retry-after` (seconds, or an HTTP date) on a 429, OpenAI also `retry-after-ms`.
"""

from __future__ import annotations

import email.utils
import math
import re
from collections.abc import Iterable, Mapping
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "RateLimit",
    "RateReading",
    "Window",
    "rate_headers",
    "read_rate_headers",
    "retry_after",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class RateLimit(BaseModel):
    """A provider's rate limit for one key and model, per minute; None leaves a
    dimension unlimited. `burst`: the window, in seconds, over which the provider
    enforces its per-minute limits (OpenAI: over shorter periods than a minute): no
    window of `burst` seconds carries more than its share (1: a second's share in any
    second; 60: a minute's, which may go sooner).
    `learn`: adapt below these limits (or with none) from the replies' rate-limit
    headers, 429s and latency."""

    model_config = _FROZEN
    requests_per_minute: float | None = Field(default=None, gt=0)
    tokens_per_minute: float | None = Field(default=None, gt=0)
    input_tokens_per_minute: float | None = Field(default=None, gt=0)
    output_tokens_per_minute: float | None = Field(default=None, gt=0)
    burst: float = Field(default=1.0, gt=0, le=60)
    learn: bool = True

    @property
    def per_minute(self) -> tuple[float | None, float | None, float | None, float | None]:
        """(requests, tokens, input tokens, output tokens) per minute."""
        return (
            self.requests_per_minute,
            self.tokens_per_minute,
            self.input_tokens_per_minute,
            self.output_tokens_per_minute,
        )

    @property
    def binds(self) -> bool:
        """Whether any dimension is limited."""
        return any(v is not None for v in self.per_minute)

    def tightest(self, other: RateLimit | None) -> RateLimit:
        """Each dimension at the lower of the two (None: unlimited); this one's burst."""
        if other is None:
            return self
        mine, theirs = self.per_minute, other.per_minute
        low = [_lower(a, b) for a, b in zip(mine, theirs, strict=True)]
        return RateLimit(
            requests_per_minute=low[0],
            tokens_per_minute=low[1],
            input_tokens_per_minute=low[2],
            output_tokens_per_minute=low[3],
            burst=self.burst,
            learn=self.learn and other.learn,
        )


def _lower(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


class Window(BaseModel):
    """One dimension as a reply states it: the limit, what remains, and the seconds
    until it is whole again (each None when not said)."""

    model_config = _FROZEN
    limit: float | None = None
    remaining: float | None = None
    reset: float | None = None


class RateReading(BaseModel):
    """What a reply's rate-limit headers said: each dimension's window, and
    `retry_after` (seconds) when the provider asked for a pause."""

    model_config = _FROZEN
    requests: Window | None = Field(default=None, exclude_if=lambda v: v is None)
    tokens: Window | None = Field(default=None, exclude_if=lambda v: v is None)
    input_tokens: Window | None = Field(default=None, exclude_if=lambda v: v is None)
    output_tokens: Window | None = Field(default=None, exclude_if=lambda v: v is None)
    retry_after: float | None = Field(default=None, exclude_if=lambda v: v is None)

    @model_validator(mode="after")
    def _says_something(self) -> RateReading:
        if self.windows == (None, None, None, None) and self.retry_after is None:
            raise ValueError("a reading says at least one window or a retry-after")
        return self

    @property
    def windows(self) -> tuple[Window | None, Window | None, Window | None, Window | None]:
        """(requests, tokens, input tokens, output tokens), as `RateLimit.per_minute`."""
        return (self.requests, self.tokens, self.input_tokens, self.output_tokens)

    def limit(self, burst: float = 1.0) -> RateLimit | None:
        """The limits the headers state, taken as per minute (both providers' are)."""
        per_minute = [w.limit if w is not None else None for w in self.windows]
        if all(v is None or v <= 0 for v in per_minute):
            return None
        clean = [v if v is not None and v > 0 else None for v in per_minute]
        return RateLimit(
            requests_per_minute=clean[0],
            tokens_per_minute=clean[1],
            input_tokens_per_minute=clean[2],
            output_tokens_per_minute=clean[3],
            burst=burst,
        )


_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-", "retry-after")
_OPENAI = "x-ratelimit-{part}-{dim}"
_ANTHROPIC = "anthropic-ratelimit-{dim}-{part}"
_DIMENSIONS = ("requests", "tokens", "input-tokens", "output-tokens")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def rate_headers(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The rate-limit headers among a reply's (name, value) pairs, names lower-cased
    (one pass: most replies have none)."""
    return {name.lower(): value for name, value in items if name.lower().startswith(_PREFIXES)}


def read_rate_headers(headers: Mapping[str, str], now: float) -> RateReading | None:
    """The reading of a reply's headers (None: they say nothing of rates). `headers`
    are looked up by lower-case name (`rate_headers` makes such a dict; httpx's
    headers do it too); `now` is the wall-clock time the reply came (Unix seconds),
    against which absolute resets become seconds."""
    windows: list[Window | None] = []
    for dim in _DIMENSIONS:
        window = _window(headers, _ANTHROPIC, dim, now)
        if window is None and dim in ("requests", "tokens"):
            window = _window(headers, _OPENAI, dim, now)
        windows.append(window)
    if windows[2] is not None or windows[3] is not None:
        # Anthropic's `tokens-*` beside its input and output limits is a view of the
        # most restrictive of them, not a limit of all tokens of its own: held as one,
        # it would keep each request's unused `max_tokens` counted (as OpenAI's limit
        # of all tokens does), and pace a key far under what its limits allow.
        windows[1] = None
    retry = retry_after(headers, now)
    if retry is None and all(w is None for w in windows):
        return None
    return RateReading(
        requests=windows[0],
        tokens=windows[1],
        input_tokens=windows[2],
        output_tokens=windows[3],
        retry_after=retry,
    )


def _window(headers: Mapping[str, str], shape: str, dim: str, now: float) -> Window | None:
    limit = _number(headers.get(shape.format(part="limit", dim=dim)))
    remaining = _number(headers.get(shape.format(part="remaining", dim=dim)))
    reset = _reset(headers.get(shape.format(part="reset", dim=dim)), now)
    if limit is None and remaining is None and reset is None:
        return None
    return Window(limit=limit, remaining=remaining, reset=reset)


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _reset(value: str | None, now: float) -> float | None:
    """Seconds until a reset: a Go duration (OpenAI), an RFC 3339 time (Anthropic), or
    plain seconds."""
    if not value:
        return None
    value = value.strip()
    plain = _number(value)
    if plain is not None:
        return plain
    pieces = _DURATION.findall(value)
    if pieces and "".join(n + u for n, u in pieces) == value:
        return sum(float(n) * _UNIT_SECONDS[u] for n, u in pieces)
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)


def retry_after(headers: Mapping[str, str], now: float) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `retry-after` as seconds or an HTTP
    date (None: not said)."""
    ms = _number(headers.get("retry-after-ms"))
    if ms is not None:
        return ms / 1000
    value = headers.get("retry-after")
    if not value:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return max(0.0, when.timestamp() - now)

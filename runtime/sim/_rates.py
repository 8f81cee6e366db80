"""Rate limits as providers enforce them: a continuously refilled bucket (or a sliding
window) per limit, per API key (and model), the 429 each provider sends past it and the
headers on every reply.

A bucket holds about one second's share of its per-minute limit (times
``burst_seconds``) and refills continuously. A request costing more than the bucket
holds is admitted when the bucket is full and leaves it in debt (so a 4,000-token
request still passes a 60,000-tokens-per-minute limit, once a second's share is back);
one costing more than the whole per-minute limit never fits.

With ``window_seconds`` the limit is enforced over sliding windows of that length
instead (OpenAI: per-minute limits "enforced over shorter periods"): a request is
admitted if what was admitted in the last ``window_seconds``, plus its cost, is at most
the window's share (``limit * window_seconds / 60``). Stricter than a bucket of the same
share, which lets its burst and a window's refill through in one window.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal

from pydantic_core import to_json

Kind = Literal["requests", "tokens", "input_tokens", "output_tokens"]
KINDS: tuple[Kind, ...] = ("requests", "tokens", "input_tokens", "output_tokens")
# Floating-point slack: a client that waits exactly the advertised time must fit.
_SLACK = 1e-6


@dataclass(frozen=True)
class SimRateLimits:
    """Per-minute limits the simulator enforces per API key (and per model, as OpenAI
    and Anthropic key them, unless ``per_model=False``).

    ``requests_per_minute``: requests admitted. ``tokens_per_minute``: prompt tokens
    plus ``max_tokens`` (``max_completion_tokens``, ``max_output_tokens``) counted at
    admission, as OpenAI counts them. ``input_tokens_per_minute``: prompt tokens not
    read from the prompt cache (Anthropic's ITPM). ``output_tokens_per_minute``:
    ``max_tokens`` charged at admission, the unused part given back when the reply ends
    (Anthropic's OTPM). Every limit applies on every wire. ``burst_seconds``: each
    bucket holds this many seconds' share of its limit (1: "1,200 a minute" admits
    about 20 in any second; 60: a whole minute's worth at once). ``window_seconds``:
    enforce each limit over sliding windows of this length instead of buckets (1:
    "1,200 a minute" admits at most 20 in any one second, whenever they come); the
    headers still state the per-minute limits."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    input_tokens_per_minute: int | None = None
    output_tokens_per_minute: int | None = None
    burst_seconds: float = 1.0
    per_model: bool = True
    window_seconds: float | None = None

    def __post_init__(self) -> None:
        for kind in KINDS:
            value = self.limit(kind)
            if value is not None and value < 1:
                raise ValueError(f"{kind}_per_minute must be at least 1")
        if not self.burst_seconds > 0:
            raise ValueError("burst_seconds must be positive")
        if self.window_seconds is not None and not 0 < self.window_seconds <= 60:
            raise ValueError("window_seconds must be within (0, 60]")

    def limit(self, kind: Kind) -> int | None:
        """The per-minute limit of `kind`, or None."""
        value: int | None = getattr(self, f"{kind}_per_minute")
        return value

    @property
    def any(self) -> bool:
        return any(self.limit(kind) is not None for kind in KINDS)


@dataclass(frozen=True, slots=True)
class Cost:
    """What one request charges at admission: its prompt tokens, the part of them read
    from the prompt cache, and its ``max_tokens`` (0 when it sets none)."""

    input_tokens: int
    max_tokens: int = 0
    cached_tokens: int = 0

    def of(self, kind: Kind) -> int:
        if kind == "requests":
            return 1
        if kind == "tokens":
            return self.input_tokens + self.max_tokens
        if kind == "input_tokens":
            return max(self.input_tokens - self.cached_tokens, 0)
        return self.max_tokens


class Bucket:
    """A continuously refilled bucket: ``rate`` per second up to ``capacity``. Time is
    passed in (``now``, seconds on any monotonic clock), so it is tested without
    waiting."""

    __slots__ = ("capacity", "level", "limit", "rate", "stamp")

    def __init__(self, limit: int, burst_seconds: float, now: float) -> None:
        self.limit = limit
        self.rate = limit / 60.0
        self.capacity = max(self.rate * burst_seconds, 1.0)
        self.level = self.capacity
        self.stamp = now

    def _refill(self, now: float) -> None:
        if now > self.stamp:
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
            self.stamp = now

    def too_large(self, cost: int) -> bool:
        """Whether `cost` can never be admitted."""
        return cost > max(self.limit, self.capacity)

    def wait(self, cost: int, now: float) -> float:
        """Seconds until `cost` fits (0: it fits now). A cost over the capacity fits
        when the bucket is full."""
        self._refill(now)
        need = min(cost, self.capacity)
        if self.level + _SLACK >= need:
            return 0.0
        return (need - self.level) / self.rate

    def take(self, cost: int, now: float) -> None:
        self._refill(now)
        self.level -= cost

    def give(self, amount: int, now: float) -> None:
        self._refill(now)
        self.level = min(self.capacity, self.level + amount)

    def remaining(self, now: float) -> int:
        """Whole units available now."""
        self._refill(now)
        return max(math.floor(self.level + _SLACK), 0)

    def until_full(self, now: float) -> float:
        """Seconds until the bucket is full again."""
        self._refill(now)
        return max(self.capacity - self.level, 0.0) / self.rate


class SlidingWindow:
    """A per-minute limit held over sliding windows of ``seconds``: at most ``share``
    (``limit * seconds / 60``) admitted within any one. The same interface as `Bucket`;
    time is passed in. A cost over the share fits an empty window."""

    __slots__ = ("capacity", "limit", "log", "seconds", "used")

    def __init__(self, limit: int, seconds: float, now: float) -> None:
        self.limit = limit
        self.seconds = seconds
        self.capacity = max(limit * seconds / 60.0, 1.0)
        self.log: deque[list[float]] = deque()  # [admitted at, amount], oldest first
        self.used = 0.0

    def _expire(self, now: float) -> None:
        log = self.log
        while log and log[0][0] <= now - self.seconds:
            self.used -= log.popleft()[1]
        if not log:
            self.used = 0.0

    def too_large(self, cost: int) -> bool:
        return cost > max(self.limit, self.capacity)

    def wait(self, cost: int, now: float) -> float:
        """Seconds until `cost` fits (0: it fits now): until enough of the window's
        oldest admissions leave it."""
        self._expire(now)
        over = self.used + min(cost, self.capacity) - self.capacity
        if over <= _SLACK:
            return 0.0
        for stamp, amount in self.log:
            over -= amount
            if over <= _SLACK:
                return max(stamp + self.seconds - now, 0.0)
        return max(self.log[-1][0] + self.seconds - now, 0.0)  # pragma: no cover

    def take(self, cost: int, now: float) -> None:
        self._expire(now)
        self.log.append([now, float(cost)])
        self.used += cost

    def give(self, amount: int, now: float) -> None:
        """Give back `amount` (a refund, an unused output): off the newest admissions."""
        self._expire(now)
        left = float(amount)
        for entry in reversed(self.log):
            back = min(entry[1], left)
            entry[1] -= back
            self.used -= back
            left -= back
            if left <= 0:
                break

    def remaining(self, now: float) -> int:
        self._expire(now)
        return max(math.floor(self.capacity - self.used + _SLACK), 0)

    def until_full(self, now: float) -> float:
        """Seconds until the window is empty again."""
        self._expire(now)
        return max(self.log[-1][0] + self.seconds - now, 0.0) if self.log else 0.0


Limiter = Bucket | SlidingWindow


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was refused: the limit it is over, how long until it fits
    (``None``: never, it is larger than the limit) and what it asked for."""

    cause: Kind
    wait: float | None
    limit: int
    requested: int


@dataclass(slots=True)
class Admission:
    """The charges of an admitted request, to give back when it is refused after all
    (the concurrency cap) or to settle its output at the real count."""

    buckets: dict[Kind, Limiter]
    cost: Cost
    clock: Callable[[], float]
    settled: bool = field(default=False)

    def refund(self) -> None:
        """Give every charge back."""
        now = self.clock()
        for kind, bucket in self.buckets.items():
            bucket.give(self.cost.of(kind), now)
        self.settled = True

    def settle(self, output_tokens: int) -> None:
        """The reply is over: give back the ``max_tokens`` charged to the output bucket
        that the reply did not use (Anthropic adjusts OTPM so); once."""
        if self.settled:
            return
        self.settled = True
        bucket = self.buckets.get("output_tokens")
        unused = self.cost.max_tokens - output_tokens
        if bucket is not None and unused > 0:
            bucket.give(unused, self.clock())


class RateLimiter:
    """The buckets of every (API key, model) seen; used on the server's loop only."""

    def __init__(
        self,
        limits: SimRateLimits | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.limits = limits if limits is not None and limits.any else None
        self._clock = clock
        self._wall = wall
        self._buckets: dict[tuple[str, str], dict[Kind, Limiter]] = {}

    @property
    def counts_cache(self) -> bool:
        """Whether an admission needs the prompt-cache hit (only ITPM discounts it)."""
        return self.limits is not None and self.limits.input_tokens_per_minute is not None

    def reset(self) -> None:
        """Forget every bucket (all full again)."""
        self._buckets.clear()

    def admit(
        self, key: str, model: str, cost: Cost, now: float | None = None
    ) -> Admission | Refusal | None:
        """Charge `cost` to every bucket of (`key`, `model`) if it fits in all of them
        at `now` (default: the clock); else the refusal of the limit it waits longest
        for. None: no limits."""
        now = self._clock() if now is None else now
        buckets = self._of(key, model, now)
        if buckets is None:
            return None
        worst: Refusal | None = None
        for kind, bucket in buckets.items():
            requested = cost.of(kind)
            if bucket.too_large(requested):
                return Refusal(kind, None, bucket.limit, requested)
            wait = bucket.wait(requested, now)
            if wait > 0 and (worst is None or wait > (worst.wait or 0.0)):
                worst = Refusal(kind, wait, bucket.limit, requested)
        if worst is not None:
            return worst
        for kind, bucket in buckets.items():
            bucket.take(cost.of(kind), now)
        return Admission(buckets, cost, self._clock)

    def headers(self, api: str, key: str, model: str, now: float | None = None) -> dict[str, str]:
        """The rate-limit headers of `api` (``openai``, ``openai_responses`` or
        ``anthropic``) for (`key`, `model`) at `now` (the admission's time, so they show
        its own charge exactly); none when no limit is set."""
        now = self._clock() if now is None else now
        buckets = self._of(key, model, now)
        if not buckets:
            return {}
        if api == "anthropic":
            return self._anthropic_headers(buckets, now)
        return _openai_headers(buckets, now)

    def _of(self, key: str, model: str, now: float) -> dict[Kind, Limiter] | None:
        limits = self.limits
        if limits is None:
            return None
        ident = (key, model if limits.per_model else "")
        buckets = self._buckets.get(ident)
        if buckets is None:
            buckets = {}
            for kind in KINDS:
                limit = limits.limit(kind)
                if limit is None:
                    continue
                if limits.window_seconds is not None:
                    buckets[kind] = SlidingWindow(limit, limits.window_seconds, now)
                else:
                    buckets[kind] = Bucket(limit, limits.burst_seconds, now)
            self._buckets[ident] = buckets
        return buckets

    def _anthropic_headers(self, buckets: dict[Kind, Limiter], now: float) -> dict[str, str]:
        headers: dict[str, str] = {}
        for kind, bucket in buckets.items():
            if kind == "tokens":
                continue
            remaining = bucket.remaining(now)
            if kind != "requests":
                remaining = _thousands(remaining)  # as Anthropic rounds token counts
            name = "anthropic-ratelimit-" + kind.replace("_", "-")
            headers[name + "-limit"] = str(bucket.limit)
            headers[name + "-remaining"] = str(remaining)
            headers[name + "-reset"] = self._rfc3339(bucket.until_full(now))
        view = _tokens_view(buckets, now)
        if view is not None:
            limit, remaining, until_full = view
            headers["anthropic-ratelimit-tokens-limit"] = str(limit)
            headers["anthropic-ratelimit-tokens-remaining"] = str(_thousands(remaining))
            headers["anthropic-ratelimit-tokens-reset"] = self._rfc3339(until_full)
        return headers

    def _rfc3339(self, seconds: float) -> str:
        """The wall-clock time `seconds` from now, whole seconds rounded up, UTC."""
        moment = math.ceil(self._wall() + seconds)
        return datetime.fromtimestamp(moment, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _openai_headers(buckets: dict[Kind, Limiter], now: float) -> dict[str, str]:
    headers: dict[str, str] = {}
    requests = buckets.get("requests")
    if requests is not None:
        headers["x-ratelimit-limit-requests"] = str(requests.limit)
        headers["x-ratelimit-remaining-requests"] = str(requests.remaining(now))
        headers["x-ratelimit-reset-requests"] = duration(requests.until_full(now))
    view = _tokens_view(buckets, now)
    if view is not None:
        limit, remaining, until_full = view
        headers["x-ratelimit-limit-tokens"] = str(limit)
        headers["x-ratelimit-remaining-tokens"] = str(remaining)
        headers["x-ratelimit-reset-tokens"] = duration(until_full)
    return headers


def _tokens_view(buckets: dict[Kind, Limiter], now: float) -> tuple[int, int, float] | None:
    """The "tokens" headers: the tokens-per-minute bucket if set, else input and output
    together (as Anthropic reports them: limit and remaining summed, the later reset)."""
    tokens = buckets.get("tokens")
    parts = [tokens] if tokens is not None else []
    if not parts:
        parts = [b for k, b in buckets.items() if k in ("input_tokens", "output_tokens")]
    if not parts:
        return None
    limit = sum(b.limit for b in parts)
    remaining = sum(b.remaining(now) for b in parts)
    return limit, remaining, max(b.until_full(now) for b in parts)


def _thousands(value: int) -> int:
    return value // 1000 * 1000


def duration(seconds: float) -> str:
    """A duration as OpenAI's headers and messages write it (Go's style): ``20ms``,
    ``1s``, ``1.5s``, ``6m0s``, ``1h2m3s``; milliseconds rounded up."""
    ms = math.ceil(seconds * 1000 - _SLACK)
    if ms <= 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{secs}"
    if minutes:
        return f"{minutes}m{secs}"
    return secs


def retry_after(refusal: Refusal) -> dict[str, str]:
    """``retry-after`` in whole seconds, rounded up, as providers send it; for a request
    that never fits, ``x-should-retry: false`` instead (both SDKs honour it)."""
    if refusal.wait is None:
        return {"x-should-retry": "false"}
    return {"retry-after": str(max(math.ceil(refusal.wait - _SLACK), 1))}


_OPENAI_NAMES: dict[Kind, str] = {
    "requests": "requests per min (RPM)",
    "tokens": "tokens per min (TPM)",
    "input_tokens": "input tokens per min (ITPM)",
    "output_tokens": "output tokens per min (OTPM)",
}


def error_body(api: str, refusal: Refusal, model: str, request_id: str) -> bytes:
    """The 429 body each provider sends past a rate limit."""
    if api == "anthropic":
        return _anthropic_error(refusal, request_id)
    where = f"for {model} in organization org-sim on {_OPENAI_NAMES[refusal.cause]}"
    numbers = f"Limit {refusal.limit}, Requested {refusal.requested}."
    if refusal.wait is None:
        message = (
            f"Request too large {where}: {numbers} The input or output tokens must be "
            "reduced in order to run successfully."
        )
    else:
        message = (
            f"Rate limit reached {where}: {numbers} Please try again in "
            f"{duration(refusal.wait)}. Visit https://platform.openai.com/account/rate-limits "
            "to learn more."
        )
    kind = "requests" if refusal.cause == "requests" else "tokens"
    error = {"message": message, "type": kind, "param": None, "code": "rate_limit_exceeded"}
    return to_json({"error": error})


def _anthropic_error(refusal: Refusal, request_id: str) -> bytes:
    unit = refusal.cause.replace("_", " ")
    message = (
        f"This request would exceed your organization's rate limit of {refusal.limit:,} "
        f"{unit} per minute. For details, refer to: "
        "https://docs.claude.com/en/api/rate-limits. You can see the response headers for "
        "current usage. Please reduce the prompt length or the maximum tokens requested, "
        "or try again later."
    )
    return to_json(
        {
            "type": "error",
            "error": {"type": "rate_limit_error", "message": message},
            "request_id": request_id,
        }
    )

"""`Retry`: how often a batch item is tried again, and how long it waits in between."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

__all__ = ["Backoff", "Retry", "RetryOn"]

Backoff: TypeAlias = "Literal['none', 'linear', 'exponential'] | Callable[[int], float]"
RetryOn: TypeAlias = (
    "Callable[[BaseException], bool] | type[BaseException] | tuple[type[BaseException], ...]"
)
_BACKOFFS = ("none", "linear", "exponential")


@dataclass(frozen=True)
class Retry:
    """Per-item retries of a batch.

    `attempts` counts the first try (1 = never retry). After failed attempt `n` the item
    waits `backoff`: "none" (0), "linear" (`base_delay * n`), "exponential"
    (`base_delay * 2**(n-1)`) or a callable `n -> seconds`; capped at `max_delay`;
    `jitter` spreads it over [50%, 100%] so that items failing together do not retry
    together. An error's `retry_after` (the provider's word) is a floor: never sooner,
    and not capped. A waiting item does not hold a concurrency slot.

    Which errors are retried: by default those whose `retryable` is true (rate limits,
    timeouts, 5xx; not authentication or invalid requests; other exceptions are not).
    `retry_on` replaces that rule: exception types, or a predicate
    (`lambda e: getattr(e, "retryable", False) or isinstance(e, ContentFilterError)`
    to extend it). An error of the job's configuration is never retried, whatever the
    rule says (an authentication error, a missing model, a request the provider refuses
    as invalid: the same request would meet it again; see docs/batch.md).

    `sleep` is what waits; tests pass a recorder so that nothing really sleeps.
    """

    attempts: int = 3
    backoff: Backoff = "exponential"
    retry_on: RetryOn | None = None
    max_delay: float = 30.0
    jitter: bool = True
    base_delay: float = 1.0
    sleep: Callable[[float], Awaitable[None]] = field(
        default=asyncio.sleep, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"Retry.attempts must be at least 1, not {self.attempts}")
        if not callable(self.backoff) and self.backoff not in _BACKOFFS:
            raise ValueError(f"Retry.backoff must be one of {_BACKOFFS} or a callable")
        if self.max_delay < 0 or self.base_delay < 0:
            raise ValueError("Retry delays must not be negative")

    def should_retry(self, error: BaseException | None) -> bool:
        """Whether a failure with `error` may be tried again (attempts aside)."""
        if error is None:
            return False
        rule = self.retry_on
        if rule is None:
            return getattr(error, "retryable", False) is True
        if isinstance(rule, (type, tuple)):
            return isinstance(error, rule)
        return bool(rule(error))

    def delay(self, failed_attempt: int, error: BaseException | None) -> float:
        """Seconds to wait after attempt `failed_attempt` (1-based) failed with `error`."""
        seconds = min(self._backoff(failed_attempt), self.max_delay)
        if self.jitter and seconds > 0:
            seconds *= random.uniform(0.5, 1.0)
        retry_after = getattr(error, "retry_after", None)
        if isinstance(retry_after, (int, float)) and retry_after > seconds:
            seconds = float(retry_after)
        return seconds

    def _backoff(self, n: int) -> float:
        if callable(self.backoff):
            return max(0.0, float(self.backoff(n)))
        if self.backoff == "linear":
            return self.base_delay * n
        if self.backoff == "exponential":
            return self.base_delay * 2.0 ** min(n - 1, 64)
        return 0.0

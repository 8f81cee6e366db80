"""What a batch's attempts are made of, as the batch seam carries them: a `Job` in, an
`Outcome` per attempt, a `BatchItem` out, and the `Feed` and `Deliver` around them.

They live beside the seam (`BatchPool`, `PoolPlan`) because a backend's pool (Ray's batch
runners) speaks them as much as the in-process engine (`raygent._batch.engine`) does.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

from ..abort import AbortSignal
from ..errors import AbortedError, RaygentError
from ..usage import Usage

if TYPE_CHECKING:
    from .provider_lines import TripLines

__all__ = [
    "EMPTY_USAGE",
    "Attempt",
    "BatchItem",
    "Deliver",
    "Feed",
    "ItemStatus",
    "Job",
    "LinedAttempt",
    "Outcome",
    "cancelled",
    "ended",
    "session_of",
]

ItemStatus = Literal["completed", "failed", "cancelled", "awaiting_approval"]
EMPTY_USAGE = Usage()


@dataclass(slots=True)
class Job:
    """One item to run. With `error` set the item could not be read: it fails unrun."""

    index: int
    key: Any
    input: Any = None
    meta: dict[str, Any] | None = None
    error: BaseException | None = None
    attempts: int = 0
    usage: Usage = EMPTY_USAGE
    started: float | None = None
    # The last attempt's run result when the next one continues it (an agent's run on
    # a session: one logical run across attempts); None otherwise.
    previous: Any = None
    # Attempts lost with the process that ran them (a Ray runner that died): counted in
    # `attempts`, but the next one is the same run again, not a retry.
    lost: int = 0
    # What its earlier attempts met of rates (the last one's is on its result): the
    # 429s, and each wait for a rate as (wall-clock start, seconds).
    throttled: int = 0
    rate_waits: tuple[tuple[float, float], ...] = ()


@dataclass(slots=True)
class Outcome:
    """What one attempt produced."""

    status: ItemStatus
    result: Any = None
    data: Any = None
    error: BaseException | None = None
    usage: Usage = EMPTY_USAGE


@dataclass(slots=True)
class BatchItem:
    """One item as it ended.

    `result` is what the last attempt returned (an `AgentResult` for an agent), `data`
    its value (the structured output, else the text; None unless completed), `error`
    the last attempt's error, `usage` the sum over every attempt, failed ones included,
    `latency` seconds from its first attempt to its end (None if it never ran), `input`
    what it ran on and `meta` the other fields of its row.
    """

    index: int
    key: Any
    status: ItemStatus
    result: Any = None
    data: Any = None
    error: BaseException | None = None
    attempts: int = 0
    usage: Usage = field(default_factory=Usage)
    latency: float | None = None
    input: Any = None
    meta: dict[str, Any] | None = None
    # Of its attempts before the last: the 429s they met and their rate waits
    # ((wall-clock start, seconds)), which a report counts besides the last one's.
    throttled: int = 0
    rate_waits: tuple[tuple[float, float], ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "completed"


def ended(job: Job, outcome: Outcome) -> BatchItem:
    """The item `job` became, ending with `outcome` (its last attempt's)."""
    return BatchItem(
        index=job.index,
        key=job.key,
        status=outcome.status,
        result=outcome.result,
        data=outcome.data if outcome.status == "completed" else None,
        error=outcome.error,
        attempts=job.attempts,
        usage=job.usage,
        latency=None if job.started is None else time.monotonic() - job.started,
        input=job.input,
        meta=job.meta,
        throttled=job.throttled,
        rate_waits=job.rate_waits,
    )


def session_of(job: Job) -> tuple[Any, Any] | None:
    """The session an item runs in (its `session_id` and `user_id`), if it names one."""
    meta = job.meta
    if meta is None or meta.get("session_id") is None:
        return None
    return (meta["session_id"], meta.get("user_id"))


def cancelled(signal: AbortSignal, ended: BaseException | None = None) -> AbortedError:
    """The error of an item a batch ended unfinished when `signal` fired: `ABORTED`
    wherever the item was (not started, waiting to retry, running) and on every backend.
    `ended`: the error its run ended with (an agent's `AGENT_CANCELLED`, kept on its
    result), named in `run_error`."""
    reason = signal.reason or "no reason given"
    details: dict[str, Any] = {"reason": signal.reason}
    if isinstance(ended, RaygentError) and not isinstance(ended, AbortedError):
        details["run_error"] = ended.code
    return AbortedError(f"batch cancelled: {reason}", **details)


Attempt: TypeAlias = Callable[[Job, AbortSignal], Coroutine[Any, Any, Outcome]]


class LinedAttempt(Protocol):
    """An attempt whose run's trips may go as `lines` of a provider batch (None:
    online): what `raygent._batch.exec.attempt_for` makes, an `Attempt` as it is."""

    def __call__(
        self, job: Job, signal: AbortSignal, lines: TripLines | None = None
    ) -> Coroutine[Any, Any, Outcome]: ...


Deliver: TypeAlias = Callable[[BatchItem], Awaitable[None]]
Feed: TypeAlias = "Iterator[Job] | AsyncIterator[Job]"

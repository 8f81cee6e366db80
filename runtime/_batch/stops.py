"""When a job stops on its own: an error that every item would meet ends the job at once,
instead of failing (and sending) its items one by one.

Which errors (`config_kind`):

- "job": the same for every item, whatever its content: the provider refused the key
  (401/403, or no key at all), the model does not exist (404), the account has no quota
  left (a 429 that is not retryable: `insufficient_quota`), raygent is offline. The
  first one stops the job, whenever it comes (a key revoked mid-job stops it too). The
  in-flight core stops on it as well (a Ray runner stops its own share at once, before
  the driver hears of it).
- "shape": the request's shape or one item's content, the error alone cannot tell: a
  provider's 400/422 that is not about context length or content (those have their own
  errors, and are the item's), an option or a capability refused before sending. It
  stops the job only on its first items: `CONFIRM` items failed with the same error
  (code and message) and none completed. Once an item completed, the configuration
  works: such an error is that item's own, and fails it alone.

Neither kind is retried: a retry sends the same request again.

What the sink holds after a stop: what really completed. The items failed by the error
that stopped the job (and those held back while it was unconfirmed) and the items it
ended unfinished (`JobStoppedError`) are not written, so `resume=True` runs them again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import JobStoppedError, RaygentError, error_dict
from ..seams.batch import BatchItem
from .report import Stopped
from .sinks import key_token

__all__ = ["CONFIRM", "StopRule", "Verdict", "config_kind", "stop_message"]

ConfigKind = Literal["job", "shape"]
# Items that must fail alike, none completed, before a "shape" error stops the job.
CONFIRM = 3
# "shape" failures held back from the sink while unconfirmed (unlike errors alike):
# past this many, the oldest are written as the failures they may well be.
_MAX_HELD = 64
_JOB_CODES = frozenset({"PROVIDER_AUTHENTICATION", "OFFLINE"})
_SHAPE_CODES = frozenset(
    {"PROVIDER_INVALID_REQUEST", "INVALID_OPTIONS", "MODEL_CAPABILITY", "PROMPT"}
)
_FLOW_STEP = "FLOW_STEP_FAILED"


def config_kind(error: BaseException | None) -> ConfigKind | None:
    """Whether `error` says the job's configuration is wrong ("job": for every item;
    "shape": maybe, see the module docstring), or None (the item's own failure)."""
    facts = _facts(error)
    if facts is None:
        return None
    code, status, retryable = facts
    if code in _JOB_CODES:
        return "job"
    if code == "PROVIDER_RATE_LIMITED":
        return "job" if retryable is False else None  # no quota left, not a rate
    if code == "PROVIDER_INVALID_REQUEST" and status == 404:
        return "job"  # the model (the endpoint) does not exist
    return "shape" if code in _SHAPE_CODES else None


def _facts(error: BaseException | None) -> tuple[str, Any, Any] | None:
    """(code, HTTP status, retryable) of a raygent error, through a failed flow step to
    the step's own error."""
    if not isinstance(error, RaygentError):
        return None
    if error.code == _FLOW_STEP:
        return _cause_facts(error.details.get("cause"))
    return error.code, error.details.get("status"), error.retryable


def _cause_facts(cause: Any) -> tuple[str, Any, Any] | None:
    if not isinstance(cause, Mapping) or not isinstance(cause.get("code"), str):
        return None
    if cause["code"] == _FLOW_STEP:
        return _cause_facts(cause.get("cause"))
    return cause["code"], cause.get("status"), cause.get("retryable")


def stop_message(item: BatchItem, resume: bool) -> str:
    """What a configuration stop says: the error, the item that met it, what to do."""
    error = item.error
    code = getattr(error, "code", None) or type(error).__name__
    after = (
        "fix it, then go on with this job: resume=True, the same sink"
        if resume
        else "fix it, then run the job again"
    )
    return (
        f"configuration error (item {item.index}, key {key_token(item.key)!r}): {code}: "
        f"{error}; every item would meet it, so the job stopped: {after}"
    )


def _signature(item: BatchItem) -> tuple[Any, str]:
    return getattr(item.error, "code", None), str(item.error)


@dataclass
class Verdict:
    """What the collector does with an item that ended: `item` as it is recorded (an
    item the stop left unfinished carries `JobStoppedError`), the items to write to the
    sink now (this one, earlier ones held back, or none), and the stop it caused."""

    item: BatchItem
    record: list[BatchItem]
    stop: Stopped | None = None


@dataclass
class StopRule:
    """Watches the items of a job as they end and says when its configuration is wrong
    (see the module docstring). `resume`: the job has a sink to go on from; not
    `enabled` (`check=False`), it never stops a job."""

    resume: bool = False
    enabled: bool = True
    stopped: Stopped | None = None
    working: bool = False  # an item completed: the configuration works
    _held: list[BatchItem] = field(default_factory=list)  # "shape" failures, unconfirmed
    _cause: BatchItem | None = None

    def observe(self, item: BatchItem) -> Verdict | None:
        """What to do with `item`; None: record it as it is (the common case, kept
        cheap: this runs for every item of every job)."""
        if self.stopped is not None:
            return self._after_stop(item)
        if not self.enabled:
            return None
        if item.status == "completed":
            self.working = True
            if not self._held:
                return None
            held, self._held = self._held, []
            return Verdict(item, [*held, item])
        kind = config_kind(item.error) if item.status == "failed" else None
        if kind is None or (kind == "shape" and self.working):
            return None
        if kind == "shape":
            self._held.append(item)
            if not self._confirmed(item):
                overflow = self._held[: max(0, len(self._held) - _MAX_HELD)]
                del self._held[: len(overflow)]
                return Verdict(item, overflow)
        return Verdict(item, [], self._stop(item))

    def release(self) -> list[BatchItem]:
        """The failures held back, once the job has ended without confirming a stop."""
        held, self._held = self._held, []
        return held if self.stopped is None else []

    def _confirmed(self, item: BatchItem) -> bool:
        """`CONFIRM` items held back failed with the error `item` failed with."""
        alike = _signature(item)
        return sum(1 for held in self._held if _signature(held) == alike) >= CONFIRM

    def _stop(self, item: BatchItem) -> Stopped:
        self._cause = item
        self._held = []
        assert item.error is not None
        self.stopped = Stopped(
            why="configuration",
            message=stop_message(item, self.resume),
            index=item.index,
            key=key_token(item.key),
            error=error_dict(item.error),
        )
        return self.stopped

    def _after_stop(self, item: BatchItem) -> Verdict:
        """Only what completed is written; what the stop left unfinished says so."""
        if item.status == "completed":
            return Verdict(item, [item])
        if item.status == "cancelled" and self._cause is not None:
            cause = self._cause
            error = JobStoppedError(
                f"not completed: the job stopped on a configuration error of item "
                f"{cause.index} ({getattr(cause.error, 'code', None)}: {cause.error})",
                stopped_by=key_token(cause.key),
                cause=error_dict(cause.error) if cause.error is not None else None,
            )
            return Verdict(dataclasses.replace(item, error=error), [])
        return Verdict(item, [])

"""What a batch runs: each item read into a `Job`, and one attempt of the executable.

An executable is either *runnable* (an agent, or anything with an async
`execute(input, **run_options)` returning a run result: future workflows fit) or a plain
async callable `fn(item)`.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

from .._message_input import as_messages
from ..abort import AbortSignal
from ..errors import AbortedError, BudgetExceededError, RaygentError
from ..executable import TakesRunOptions
from ..messages import MESSAGE_TYPES, ImagePart, TextPart
from ..observers.report import AgentResult
from ..seams.attempt import AttemptPlan
from ..seams.batch import EMPTY_USAGE, Job, LinedAttempt, Outcome
from ..seams.provider_lines import TripLines
from ..usage import Usage
from .durable import attempt_usage

__all__ = [
    "InputError",
    "ItemKey",
    "JobMaker",
    "Unreadable",
    "attempt_for",
    "grace_for",
    "is_runnable",
    "outcome_of",
]

ItemKey: TypeAlias = "str | Callable[[Any], Any]"
RUN_GRACE = 5.0
# An agent's item may name the session it runs in (the agent needs `memory=`), and its
# tenant ("tenant").
SESSION_FIELDS = frozenset({"session_id", "user_id"})
_RUN_STATUSES = frozenset({"completed", "failed", "cancelled", "incomplete", "awaiting_approval"})


class InputError(RaygentError):
    """An item could not be read or understood (a line that is not JSON, a row an agent
    cannot run, a failing key). `fatal`: the input itself failed, and nothing after this
    item was read."""

    code = "BATCH_INPUT"
    category = "input"


class Unreadable:
    """What a reader yields for a row it could not read: the item fails, unrun."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def is_runnable(executable: Any) -> bool:
    return callable(getattr(executable, "execute", None))


class JobMaker:
    """Turns the item at `index` into a Job: its key, its input, the rest as metadata.

    The key is `item_key` (a field name, or a callable on the item), else the item's
    `key` or `id` field, else its index. For a runnable, an item is a str, a message
    list, or a mapping with an `input` field (other fields become `meta`); a plain
    callable gets the item as it is.
    """

    def __init__(self, *, runnable: bool, item_key: ItemKey | None) -> None:
        self._runnable = runnable
        self._item_key = item_key

    def __call__(self, index: int, raw: Any) -> Job:
        if isinstance(raw, Unreadable):
            return Job(index, index, error=raw.error)
        try:
            key = self._key(index, raw)
        except Exception as exc:
            return Job(index, index, error=_bad_item(index, exc))
        if not self._runnable:
            return Job(index, key, input=raw)
        try:
            value, meta = agent_input(raw)
        except Exception as exc:
            return Job(index, key, error=_bad_item(index, exc))
        return Job(index, key, input=value, meta=meta)

    def key_of(self, index: int, raw: Any) -> Any:
        """The key of the item at `index` (what `__call__` gives the job; an estimate's
        sample keeps its items' keys in the whole job)."""
        return self._key(index, raw)

    def _key(self, index: int, raw: Any) -> Any:
        item_key = self._item_key
        if callable(item_key):
            return item_key(raw)
        if item_key is not None:
            if not isinstance(raw, Mapping) or item_key not in raw:
                raise ValueError(f"item {index} has no {item_key!r} field to key it by")
            return raw[item_key]
        if not isinstance(raw, str) and isinstance(raw, Mapping):
            for field in ("key", "id"):
                if raw.get(field) is not None:
                    return raw[field]
        return index


def _bad_item(index: int, exc: Exception) -> InputError:
    said = str(exc) if isinstance(exc, _ItemShapeError) else f"{type(exc).__name__}: {exc}"
    error = InputError(f"items[{index}]: {said}")
    error.__cause__ = exc
    return error


def agent_input(raw: Any) -> tuple[Any, dict[str, Any] | None]:
    """(the input an agent runs on, the item's other fields)."""
    if isinstance(raw, str):  # the common case, ahead of the slower ABC checks
        return raw, None
    if isinstance(raw, Mapping):
        if "input" in raw:
            meta = {k: v for k, v in raw.items() if k != "input"}
            return _as_input(raw["input"]), meta or None
        if "role" in raw:
            return as_messages([raw], "input"), None
        fields = ", ".join(map(str, list(raw)[:8]))
        raise ValueError(f"an agent's item needs an 'input' field; this one has: {fields}")
    return _as_input(raw), None


_PIECES = (*MESSAGE_TYPES, TextPart, ImagePart)  # what a list an agent runs on holds


class _ItemShapeError(TypeError):
    """An item that is no input an agent runs on (said as it is, in raygent's words)."""


def _as_input(value: Any) -> Any:
    if isinstance(value, Mapping) and "role" in value:
        return as_messages([value], "input")
    if isinstance(value, (list, tuple)) and any(isinstance(v, Mapping) for v in value):
        # Messages as read from JSON, CSV or Parquet (any shape raygent reads).
        return as_messages(value, "input")
    if isinstance(value, (str, *MESSAGE_TYPES)) or (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(v, MESSAGE_TYPES) for v in value)
    ):
        return value
    raise _ItemShapeError(
        f'expected text, a message or a dict with "input", not {type(value).__name__}'
    )


def attempt_for(
    executable: Any, run_options: Mapping[str, Any] | None, plan: AttemptPlan | None = None
) -> LinedAttempt:
    """One attempt of `executable` on a job; never raises (failures are outcomes). A
    runnable's run gets its attempt's scope (`seams.attempt.RunScope`: the job's budget,
    the run it continues, its provider-batch lines) as its `scope=` option."""
    plan = plan or AttemptPlan()
    if is_runnable(executable):
        execute = executable.execute
        # The batch's signal is the one that stops runs.
        options = {k: v for k, v in (run_options or {}).items() if k != "signal"}
        durable_runs, item_runs, job_budget = plan.durable, plan.items, plan.job_budget
        # Only an agent with memory writes its item's session (the others ignore it).
        on_sessions = item_runs is not None and getattr(executable, "memory", None) is not None
        # An item's session goes only to an executable that takes one (a flow does not,
        # and refuses a run option it does not take).
        takes = isinstance(executable, TakesRunOptions)
        fields = SESSION_FIELDS & executable.run_option_names if takes else SESSION_FIELDS
        # An item's tenant (a name or a `raygent.Tenant`), as it names its session.
        tenants = not takes or "tenant" in executable.run_option_names

        async def run(job: Job, signal: AbortSignal, lines: TripLines | None = None) -> Outcome:
            if job_budget is not None and job_budget.exhausted is not None:
                return Outcome("failed", error=_not_started(job_budget.exhausted))
            meta = job.meta
            item_options = dict(options)
            recover = False
            if meta is not None and not fields.isdisjoint(meta):
                # An item's own session: its runs load and save that conversation.
                item_options.update({k: meta[k] for k in fields & set(meta)})
                if on_sessions:
                    # One run per item, across attempts and processes: named by its key.
                    assert item_runs is not None
                    item_options["run_id"] = item_runs.run_id(job.key)
                    if job.previous is None and item_runs.recovers(job.attempts):
                        recover = True  # what it stored, the store says
            if tenants and meta is not None and meta.get("tenant") is not None:
                item_options["tenant"] = meta["tenant"]
            # A retry is the same run: it continues what its failed attempt stored.
            item_options["scope"] = plan.scope(job.previous, recover, lines)
            try:
                if durable_runs is not None:
                    value = await durable_runs.attempt(
                        executable, job.key, job.input, item_options, signal
                    )
                else:
                    value = await execute(job.input, **item_options, signal=signal)
            except AbortedError as exc:
                return Outcome("cancelled", error=exc, usage=_usage_of(exc))
            except Exception as exc:
                return Outcome("failed", error=exc, usage=_usage_of(exc))
            job.previous = (
                value if isinstance(value, AgentResult) and value.trail is not None else None
            )
            if durable_runs is not None:
                return dataclasses.replace(outcome_of(value), usage=attempt_usage(value))
            return outcome_of(value)

        return run
    if not callable(executable):
        raise TypeError(
            f"batch needs an agent or an async callable, not {type(executable).__name__}"
        )

    async def call(job: Job, signal: AbortSignal, lines: TripLines | None = None) -> Outcome:
        # No signal watch here (it costs a registration per call): on abort the pool
        # cancels a plain callable's task at once (`grace_for`).
        try:
            value = executable(job.input)
            if inspect.isawaitable(value):
                value = await value
        except AbortedError as exc:
            return Outcome("cancelled", error=exc, usage=_usage_of(exc))
        except Exception as exc:
            return Outcome("failed", error=exc, usage=_usage_of(exc))
        return outcome_of(value)

    return call


def _not_started(exhausted: BudgetExceededError) -> BudgetExceededError:
    """The error of an item a batch did not start: its job's budget ran out."""
    details = {**exhausted.details, "started": False}
    return BudgetExceededError(
        f"the job's budget ran out; the item was not started ({exhausted.message})", **details
    )


def grace_for(executable: Any) -> float:
    """Seconds an attempt gets to end on its own once the batch is aborted: a runnable
    watches the signal and ends its run cleanly (usage and all); a plain callable is
    cancelled at once."""
    return RUN_GRACE if is_runnable(executable) else 0.0


def outcome_of(value: Any) -> Outcome:
    """A run result (status, usage, error: an AgentResult or alike) by its status;
    anything else is a completed value, its `usage` counted if it has one."""
    status = getattr(value, "status", None)
    usage = getattr(value, "usage", None)
    usage = usage if isinstance(usage, Usage) else EMPTY_USAGE
    if not isinstance(status, str) or status not in _RUN_STATUSES or not hasattr(value, "error"):
        return Outcome("completed", value, value, None, usage)
    if status == "completed":
        data = getattr(value, "data", None)
        return Outcome(
            "completed", value, getattr(value, "text", None) if data is None else data, None, usage
        )
    error = value.error or RaygentError(f"the run ended {status}")
    if status == "awaiting_approval":  # not a failure, and not retried
        return Outcome("awaiting_approval", value, None, error, usage)
    return Outcome("cancelled" if status == "cancelled" else "failed", value, None, error, usage)


def _usage_of(error: BaseException) -> Usage:
    usage = getattr(error, "usage", None)
    return usage if isinstance(usage, Usage) else EMPTY_USAGE

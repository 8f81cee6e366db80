"""What `raygent.batch` takes (`BatchOptions`, defined once and shared by `batch`,
`batch_sync`, `Agent.eval`, `estimate` and `raygent batch`) and the `Plan` they resolve
to: the one place their defaults live."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict

from ..abort import AbortSignal
from ..budgets import Budget
from ..executable import TakesRunOptions
from ..models._names import (
    MODEL_OPTIONS,
    PYTHON,
    Spelling,
    check_model_options,
    check_run_options,
    unknown_option,
)
from ..models.contract import Tier
from ..seams.attempt import AttemptPlan
from ..seams.batch import BatchItem
from ..seams.retry import Retry
from .durable import durable_items, item_runs
from .exec import ItemKey
from .progress import wants_progress
from .provider.job import deadline_of
from .provider.options import ProviderBatch
from .routing.options import Route
from .routing.planner import Demand
from .sink_job import SinkJob, SinkMode, sink_job

if TYPE_CHECKING:
    from ..cache import ResponseCache
    from ..durable.options import Decision, Durable

__all__ = [
    "BATCH_OPTIONS",
    "DEFAULT_CONCURRENCY",
    "KEPT_FAILURES",
    "Answered",
    "BatchOptions",
    "Plan",
    "refuse_unknown_options",
]

DEFAULT_CONCURRENCY = 16
# With provider_batch, the attempts working at once (the ones waiting for their lines
# aside): as many as the old bound on them all, so tools of a round run together.
PROVIDER_BATCH_CONCURRENCY = 10_000
# With a sink, results live in the sink; the failures kept in memory are a sample.
KEPT_FAILURES = 1000


class BatchOptions(TypedDict, total=False):
    """The options of `batch`, `batch_sync` and `Agent.eval` (defaults in `Plan.of`).

    concurrency: attempts in flight at once (16); with `provider_batch`, the attempts
        working at once (tools, online trips; 10,000): a run waiting for its line gives
        its slot back.
    retry: per-item retries (`Retry()`: 3 attempts, exponential backoff).
    on_item: called with each `BatchItem` as it ends (sync or async; awaited before the
        next item is handed over, so keep it quick); if it raises, the error is counted
        in the report and the batch goes on.
    signal: an `AbortSignal` that cancels the batch.
    sink: a `.jsonl` file or a `.parquet` directory, written as items end.
    resume: go on with the job that wrote the sink: skip the items it completed, re-run
        its failed and cancelled ones (their runs keep their ids: what they stored in
        their sessions is continued, not stored twice).
    mode: what a new job does with a sink that holds records: "error" (the default:
        `SinkExistsError`, before anything runs), "overwrite", or "append" (this job's
        rows after the old ones; each row names its `job`). An empty or absent sink is
        simply written.
    item_key: the field (or a callable on the item) that keys an item.
    progress: a progress bar (default: on in a terminal or a notebook).
    run_options: the `RunOptions` of every agent run (`output`, `system_prompt`, ...).
    runners: on the Ray backend, how many runner actors share the batch (None: one per
        128 of concurrency, at most one per CPU of the cluster); 0 runs it in this
        process. The local backend always runs it here.
    durable: a `raygent.Durable(store=...)`: each item's run is durable, under an id made
        from its key (and the sink's job), so a retry, a dead runner or a resumed batch
        continues it from its last settled step (a new job's items are new runs).
    approvals: with `durable`, decisions for items awaiting approval: item key ->
        {call_id: Approve() | Deny(reason)}; a resumed batch continues those items.
    provider_batch: True or a `raygent.ProviderBatch(...)`: the runs' model trips go
        through the providers' batch APIs, at half the price, answered within 24 hours
        (the items in flight are bounded by its `max_waiting`, not by `concurrency`: a
        run waiting for its line costs memory only). With a sink and `resume=True`, a
        job whose driver died collects the batches it had sent instead of sending them
        again.
    deadline: when the job must be done: a `timedelta` or seconds from now, or a
        `datetime`. Each item (and each of its trips) goes the cheapest way that still
        finishes by then (`route`): by provider batch, flex, standard or priority
        online; with `provider_batch`, that only tunes the batches. Refused before
        anything is sent (`DeadlineError`) when no way meets it, or meets it within
        `budget`.
    route: with `deadline`, how items are routed: "cheapest" (the default) or a
        `raygent.Route(confidence=, store=, ways=, batch_seconds=)`; None (with
        `provider_batch`): no route, a trip goes online only once too near the deadline
        (an item's own `deadline` field then wins).
    cache: a `raygent.ResponseCache`: every run answers the requests the cache has seen
        from it, with no HTTP (rides with the run options, to the Ray runners too): a
        finished batch run again sends nothing; a resumed one pays only for what it had
        not received.
    budget: a `raygent.Budget` for the whole job, shared by its runs (on Ray, held by
        the gateway cluster-wide). A request whose worst case does not fit is not sent:
        its item fails `BUDGET_EXCEEDED` (not retried), the items in flight finish, and
        the items not started end with that error; the report's `budget` shows spent,
        reserved and left. Needs an agent or a flow (every agent a flow runs is held).
    reuse: a `raygent.Estimate` of this job (`estimate` on the same items, with the same
        `item_key`): the items its sample completed are not run again; their results
        are recorded as this job's (sink, report, usage, `on_item`).
    tool_errors: "fail": an item whose run has a tool call that fails ends failed
        (`TOOL_EXECUTION`); "continue" (the agent's default) lets the model read the
        error and go on. Either way the report counts the failed calls (`tool_errors`,
        `items_with_tool_errors`) and each sink row its own. Needs an agent.
    service_tier: the service tier of every request of the job's agent runs (a tier's
        name, e.g. "flex", or `raygent.Tier("flex", fallback="default")`), over the
        agents' and models' own; each trip is priced at the tier its reply names, and
        the report counts trips by tier (`tiers`) and fallbacks (`tier_fallbacks`).
        Not with `provider_batch` (a batch line has the batch API's own price).
    check: False skips the job's check before its first request (options, capabilities,
        the providers' schema rules, a round trip through its stores, its sink) and its
        stop on a configuration error met by its items (see docs/batch.md): for a store
        meant to be down, a provider the rules misjudge, items that choose their own
        models or keys (a router's).
    """

    concurrency: int
    retry: Retry | None
    on_item: Callable[[BatchItem], Any] | None
    signal: AbortSignal | None
    sink: str | os.PathLike[str] | None
    resume: bool
    mode: SinkMode | None
    item_key: ItemKey | None
    progress: bool | None
    run_options: Mapping[str, Any] | None
    runners: int | None
    durable: Durable | None
    approvals: Mapping[Any, Mapping[str, Decision]] | None
    provider_batch: bool | ProviderBatch | None
    deadline: float | timedelta | datetime | None
    route: Literal["cheapest"] | Route | None
    cache: ResponseCache | None
    budget: Budget | None
    reuse: Answered | None
    tool_errors: Literal["continue", "fail"] | None
    service_tier: str | Tier | None
    check: bool


class Answered(Protocol):
    """What `reuse=` takes (an `Estimate`): completed items by their key's token, and
    what its sample measured of the job's items (None: nothing)."""

    @property
    def answers(self) -> Mapping[str, BatchItem]: ...

    @property
    def demand(self) -> Demand | None: ...


@dataclass(frozen=True)
class Plan:
    """The options resolved: the one place their defaults live."""

    concurrency: int
    retry: Retry
    on_item: Callable[[BatchItem], Any] | None
    signal: AbortSignal | None
    sink: str | os.PathLike[str] | None
    resume: bool
    item_key: ItemKey | None
    progress: bool
    run_options: Mapping[str, Any] | None
    runners: int | None
    durable: Durable | None = None
    approvals: Mapping[Any, Mapping[str, Decision]] | None = None
    provider_batch: ProviderBatch | None = None
    deadline: float | None = None  # time.time() by which the job must be done
    route: Route | None = None  # with a deadline: how items are routed
    budget: Budget | None = None
    reused: Mapping[str, BatchItem] | None = None  # items answered already, by key token
    sink_job: SinkJob | None = None  # the sink, checked, and the job that writes it
    demand: Demand | None = None  # what `reuse=`'s sample measured of the items
    # How the job's messages name its options: to a Python caller, or the CLI's user.
    spelling: Spelling = PYTHON
    check: bool = True  # the job's check before its first request (`_batch.preflight`)
    # What each attempt gets besides the run options (to the Ray runners too): how its
    # items' runs are named; `raygent.batch` adds the job's ledger.
    attempts: AttemptPlan = field(default_factory=AttemptPlan)

    @classmethod
    def of(cls, options: BatchOptions, spelling: Spelling = PYTHON) -> Plan:
        """The options resolved, or the error of the first that makes no sense (named
        as `spelling`'s reader writes it), before anything runs."""
        refuse_unknown_options(options, None, spelling=spelling)
        say = spelling.option
        provider_batch = _provider_batch(options.get("provider_batch"))
        route = _route(options)
        if route is not None and provider_batch is None:
            provider_batch = ProviderBatch()  # its lines, where the route sends a trip by batch
        default = DEFAULT_CONCURRENCY if provider_batch is None else PROVIDER_BATCH_CONCURRENCY
        concurrency = options.get("concurrency", default)
        if not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"{say('concurrency')} must be a positive int, not {concurrency!r}")
        sink, resume = options.get("sink"), bool(options.get("resume", False))
        if resume and sink is None:
            raise ValueError(f"{say('resume', True)} needs {say('sink')} to resume from")
        if options.get("mode") is not None and sink is None:
            raise ValueError(
                f"{say('mode')} says what a job does with its sink: it needs {say('sink')}"
            )
        mode = options.get("mode")
        checked = None if sink is None else sink_job(sink, resume, mode, spelling=spelling)
        job = None if checked is None else checked.namespace
        run_options = options.get("run_options")
        cache = options.get("cache")
        if cache is not None:
            run_options = {**(run_options or {}), "cache": cache}
        run_options = _with_tool_errors(run_options, options.get("tool_errors"), spelling)
        if route is not None and options.get("service_tier") is not None:
            raise ValueError("service_tier= and deadline=: the route chooses each trip's tier")
        run_options = _with_tier(run_options, options.get("service_tier"), provider_batch, spelling)
        durable, approvals = options.get("durable"), options.get("approvals")
        if approvals is not None and durable is None:
            raise ValueError(
                f"{say('approvals')} needs {say('durable')} (the runs that wait are stored)"
            )
        if durable is not None:
            run_options = {**(run_options or {}), "durable": durable}
            runs = durable_items(job, approvals)
            attempts = AttemptPlan(runs.namespace, durable=runs)
        else:  # the naming of its runs on sessions (one run per item, all attempts)
            items = item_runs(job, resume)
            attempts = AttemptPlan(items.namespace, items=items)
        return cls(
            concurrency=concurrency,
            retry=options.get("retry") or Retry(),
            on_item=options.get("on_item"),
            signal=options.get("signal"),
            sink=sink,
            resume=resume,
            item_key=options.get("item_key"),
            progress=wants_progress(options.get("progress")),
            run_options=run_options,
            runners=_runners(options.get("runners")),
            durable=durable,
            approvals=approvals,
            provider_batch=provider_batch,
            deadline=_deadline(options.get("deadline"), provider_batch),
            route=route,
            budget=_budget(options.get("budget")),
            reused=_reused(options.get("reuse")),
            demand=_demand(options.get("reuse")),
            sink_job=checked,
            spelling=spelling,
            check=bool(options.get("check", True)),
            attempts=attempts,
        )


def _provider_batch(value: bool | ProviderBatch | None) -> ProviderBatch | None:
    if value is None or value is False:
        return None
    if value is True:
        return ProviderBatch()
    if not isinstance(value, ProviderBatch):
        raise TypeError(f"provider_batch must be True or a ProviderBatch, not {value!r}")
    return value


def _deadline(
    value: float | timedelta | datetime | None, provider_batch: ProviderBatch | None
) -> float | None:
    if value is None:
        return None
    if provider_batch is None:  # route=None, with no provider_batch=: nothing to route
        raise ValueError("deadline= with route=None is for provider_batch= jobs")
    return deadline_of(value)


def _route(options: BatchOptions) -> Route | None:
    """The route of a job with a deadline: "cheapest" (the default) or a `Route`; None
    without a deadline, or when the job says `route=None`."""
    route = options.get("route", "cheapest")
    if options.get("deadline") is None:
        if "route" in options and route is not None:
            raise ValueError("route= routes a job by its deadline: it needs deadline=")
        return None
    if route is None:
        return None
    if route == "cheapest":
        return Route()
    if not isinstance(route, Route):
        raise TypeError(f'route= takes "cheapest" or raygent.Route(...), not {route!r}')
    return route


def _with_tool_errors(
    run_options: Mapping[str, Any] | None, tool_errors: str | None, spelling: Spelling
) -> Mapping[str, Any] | None:
    """`tool_errors=` rides with every run's options (to the Ray runners too)."""
    if tool_errors is None:
        return run_options
    if tool_errors not in ("continue", "fail"):
        raise ValueError(
            f'{spelling.option("tool_errors")} must be "continue" or "fail", not {tool_errors!r}'
        )
    return {**(run_options or {}), "tool_errors": tool_errors}


def _with_tier(
    run_options: Mapping[str, Any] | None,
    tier: str | Tier | None,
    provider_batch: ProviderBatch | None,
    spelling: Spelling,
) -> Mapping[str, Any] | None:
    """`service_tier=` rides with every run's model options (to the Ray runners too)."""
    if tier is None:
        return run_options
    say = spelling.option
    if not isinstance(tier, str | Tier):
        raise TypeError(
            f"{say('service_tier')} takes a tier's name or raygent.Tier(...), not {tier!r}"
        )
    if provider_batch is not None:
        raise ValueError(two_prices(spelling))
    model_options = {**((run_options or {}).get("model_options") or {}), "service_tier": tier}
    return {**(run_options or {}), "model_options": model_options}


def two_prices(spelling: Spelling = PYTHON) -> str:
    """Why a job cannot ask for a service tier and provider batches at once."""
    tier, batch = spelling.option("service_tier"), spelling.option("provider_batch", True)
    return f"{tier} and {batch} are two prices: choose one"


BATCH_OPTIONS: frozenset[str] = BatchOptions.__optional_keys__ | BatchOptions.__required_keys__


def refuse_unknown_options(
    options: Mapping[str, Any],
    executable: Any,
    *,
    known: frozenset[str] = BATCH_OPTIONS,
    subject: str = "raygent.batch()",
    spelling: Spelling = PYTHON,
) -> None:
    """`UnknownOptionError`, before anything runs, for an option of a name the job does
    not take (`known`), naming the closest it takes or where the name belongs (a run
    option goes in `run_options`, a model option in its `model_options`), and for a run
    option `executable` does not take (when it names those it takes: an agent does).
    A plain callable takes no run options."""
    if not known.issuperset(options):
        name = next(n for n in options if n not in known)
        takes = executable.run_option_names if isinstance(executable, TakesRunOptions) else ()
        raise unknown_option(
            name,
            sorted(known),
            subject=subject,
            elsewhere=_batch_hints(takes),
            aliases=_BATCH_ALIASES,
            spelling=spelling,
        )
    run_options = options.get("run_options")
    if not run_options or executable is None:
        return
    inner = f"{subject.removesuffix(')')}run_options=...)" if not spelling.cli else subject
    if isinstance(executable, TakesRunOptions):
        check_run_options(
            run_options, executable.run_option_names, subject=inner, spelling=spelling
        )
    elif not callable(getattr(executable, "execute", None)):
        raise TypeError(
            f"{spelling.option('run_options')} is for an agent's (or a flow's) runs: a plain"
            " callable gets each item as it is"
        )
    elif isinstance(run_options, Mapping) and run_options.get("model_options"):
        check_model_options(run_options["model_options"], subject=inner, spelling=spelling)


# Names other libraries give a batch option, and the raygent name.
_BATCH_ALIASES = {
    "retries": "retry",
    "max_retries": "retry",
    "max_concurrency": "concurrency",
    "workers": "concurrency",
    "output_path": "sink",
}


def _batch_hints(run_options: Collection[str]) -> dict[str, str]:
    """Where a run option or a model option given to the batch itself goes."""
    hints = {
        name: f"{name} is a model option: pass run_options={{'model_options': {{{name!r}: ...}}}}"
        for name in sorted(MODEL_OPTIONS)
    }
    hints.update(
        {
            name: f"{name} is a run option: pass run_options={{{name!r}: ...}}"
            for name in sorted(run_options)
            if name not in BATCH_OPTIONS
        }
    )
    return hints


def _budget(budget: Budget | None) -> Budget | None:
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(f"budget= takes raygent.Budget(...), not {budget!r}")
    return budget


def _reused(reuse: Answered | None) -> Mapping[str, BatchItem] | None:
    if reuse is None:
        return None
    answers = getattr(reuse, "answers", None)
    if not isinstance(answers, Mapping):
        raise TypeError(f"reuse= takes a raygent.Estimate of this job, not {reuse!r}")
    return answers


def _demand(reuse: Answered | None) -> Demand | None:
    """What `reuse=`'s sample measured of the job's items (an `Estimate`'s), if it did."""
    demand = getattr(reuse, "demand", None)
    return demand if isinstance(demand, Demand) else None


def _runners(runners: int | None) -> int | None:
    if runners is not None and (not isinstance(runners, int) or runners < 0):
        raise ValueError(f"runners must be a non-negative int or None, not {runners!r}")
    return runners

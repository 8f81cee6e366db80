"""`raygent.estimate`: what a job will cost, from a random sample of it run for real.

    guess = await raygent.estimate(agent, "questions.jsonl", sample=50)
    print(guess)  # 10,000 items: ~$41.20 ($38.90 to $43.50), 5.1M tokens, ...

The items are read once (a seeded reservoir sample, in bounded memory: any input
`raygent.batch` takes), the sample runs through `raygent.batch` with the job's options
(its run options and its cache: a reply the cache holds costs nothing in the sample,
nor in the projection), and the totals are projected from the sample's means, with a
95% interval from its spread (Student's t, with the finite-population correction: a
sample of the whole job has no spread). The wall time is the job at its concurrency
bound: items / (bound / median item latency). With `provider_batch` the sample runs
online (a batch's turnaround is hours) and is priced at the providers' batch rates.

The sample's completed answers ride on the estimate (not serialised): `raygent.batch(
..., reuse=guess)` records them as the job's instead of paying for them again.

With `deadline=`, the estimate also plans the job's route (`Estimate.route`: items by
way, cost, when it is done and its spread), from what the sample measured (trips per
item, tokens per trip, each trip's latency, added to the route's store) and what the
store knows of batches; `raygent.batch(..., deadline=, reuse=guess)` plans from the
same measures.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import AsyncIterator, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, PrivateAttr
from typing_extensions import Unpack

from .._sync import run_sync
from ..budgets import Budget, pricing_of
from ..models._names import PYTHON, Spelling
from ..models.contract import Tier
from ..seams.batch import BatchItem
from ..usage import Usage, dollars, total_cost
from .call import batch
from .exec import ItemKey, JobMaker, is_runnable
from .job_budget import agents_of, models_of
from .plan import (
    DEFAULT_CONCURRENCY,
    PROVIDER_BATCH_CONCURRENCY,
    BatchOptions,
    Plan,
    refuse_unknown_options,
    two_prices,
)
from .preflight import check_job
from .provider.job import check_batchable, deadline_of
from .provider.options import ProviderBatch
from .provider.pool import grace_of
from .routing.job import preview, timings_of
from .routing.options import PlannedRoute, Route
from .routing.planner import Demand
from .sinks import key_token
from .sources import open_items

if TYPE_CHECKING:
    from ..cache import ResponseCache

__all__ = ["Estimate", "EstimateOptions", "estimate", "estimate_sync"]

CONFIDENCE = 0.95


class Estimate(BaseModel):
    """A job's projected totals from a sample (`raygent.estimate`).

    `items`: the job's size; `sample`: how many of its items were run; `cost_usd` the
    projected cost, `cost_usd_low` / `cost_usd_high` its 95% interval (None: a model's
    pricing is unknown); `tokens` and `requests` the projected totals (requests: those
    sent to the provider, a cache's answers apart); `cache_hits` the projected trips a
    cache answers; `seconds` the projected wall time at the job's concurrency bound
    (online); `provider_batch`: priced at the providers' batch rates."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    items: int
    sample: int
    cost_usd: float | None
    cost_usd_low: float | None
    cost_usd_high: float | None
    tokens: int
    requests: int
    seconds: float
    cache_hits: int = 0
    provider_batch: bool = False
    # With `deadline=`: the job's route, planned from the sample (see the module).
    route: PlannedRoute | None = None
    # The sample's completed items, by the token of their key in the whole job.
    _answers: dict[str, BatchItem] = PrivateAttr(default_factory=dict)
    _demand: Demand | None = PrivateAttr(default=None)

    @property
    def answers(self) -> Mapping[str, BatchItem]:
        """The sample's completed items, by their key's token (what `reuse=` records)."""
        return self._answers

    @property
    def demand(self) -> Demand | None:
        """The job's items as the sample measured them (trips, tokens a trip): what a
        job with a deadline plans from (`reuse=`)."""
        return self._demand

    def __str__(self) -> str:
        cost = "cost unknown (no pricing)"
        if self.cost_usd is not None:
            low, high = self.cost_usd_low or 0.0, self.cost_usd_high or 0.0
            cost = f"~{dollars(self.cost_usd)} ({dollars(low)} to {dollars(high)})"
            if self.provider_batch:
                cost += " at batch rates"
        cached = f", {self.cache_hits:,} trips from the cache" if self.cache_hits else ""
        time = (
            "provider batches answer within 24 h"
            if self.provider_batch
            else f"~{self.seconds:,.0f} s"
        )
        text = (
            f"{self.items:,} items: {cost}, {self.tokens:,} tokens, {self.requests:,} "
            f"requests{cached}, {time} (from a sample of {self.sample})"
        )
        return text if self.route is None else f"{text}; {self.route.line()}"


class EstimateOptions(TypedDict, total=False):
    """The job's options an estimate takes (those of `BatchOptions` that change what it
    costs, or which items are which).

    run_options: the `RunOptions` of every run. cache: the job's `ResponseCache` (its
    replies cost nothing). provider_batch: True or a `ProviderBatch`: priced at the
    batch rates. item_key: how the job keys its items (so that `reuse=` finds them).
    runners: as for `batch` (the sample runs where the job would). service_tier: as for
    `batch`: the sample runs at the tier, each trip priced at the tier it was served.
    deadline, route, budget: as for `batch`: the job's route is planned (`route`)."""

    run_options: Mapping[str, Any] | None
    cache: ResponseCache | None
    provider_batch: bool | ProviderBatch | None
    item_key: ItemKey | None
    runners: int | None
    service_tier: str | Tier | None
    deadline: float | timedelta | datetime | None
    route: Literal["cheapest"] | Route | None
    budget: Budget | None


ESTIMATE_OPTIONS: frozenset[str] = (
    EstimateOptions.__optional_keys__ | EstimateOptions.__required_keys__
)
_NAMED = ("sample", "concurrency", "seed")  # `estimate`'s own keywords


def check_estimate_options(
    executable: Any, options: Mapping[str, Any], spelling: Spelling = PYTHON
) -> None:
    """`UnknownOptionError` for an option `estimate` does not take (a batch option that
    changes nothing of the cost, or a misspelt one), or a run option `executable` does
    not take, before any item is read."""
    known = ESTIMATE_OPTIONS | frozenset(_NAMED)
    refuse_unknown_options(
        options, executable, known=known, subject="raygent.estimate()", spelling=spelling
    )


async def estimate(
    executable: Any,
    items: Any,
    sample: int = 50,
    concurrency: int | None = None,
    seed: int | None = None,
    **options: Unpack[EstimateOptions],
) -> Estimate:
    """Run a seeded random sample of `sample` items of the job for real (through
    `raygent.batch`, at `concurrency`, with the job's `options`) and project the job's
    totals (see `Estimate`). Raises only for options that make no sense, before
    anything runs (as `batch` does)."""
    check_estimate_options(executable, options)
    if not isinstance(sample, int) or sample < 1:
        raise ValueError(f"sample must be a positive int, not {sample!r}")
    due = _due(options)
    by_batch = options.get("provider_batch") not in (None, False) and due is None
    if by_batch:
        check_batchable(executable)
        if options.get("service_tier") is not None:
            raise ValueError(two_prices())
    # The job's own check, before its items are read and its sample paid for.
    job = Plan.of(
        BatchOptions(
            run_options=options.get("run_options"),
            cache=options.get("cache"),
            provider_batch=options.get("provider_batch"),
            service_tier=options.get("service_tier"),
        )
    )
    await check_job(executable, job)
    maker = JobMaker(runnable=is_runnable(executable), item_key=options.get("item_key"))
    total, chosen = await _reservoir(items, sample, random.Random(seed))
    bound = concurrency or DEFAULT_CONCURRENCY
    if not chosen:
        return Estimate(
            items=0, sample=0, cost_usd=0.0, cost_usd_low=0.0, cost_usd_high=0.0,
            tokens=0, requests=0, seconds=0.0, provider_batch=by_batch,
        )  # fmt: skip
    # Each sampled item keeps the key it has in the whole job (its position, or its field).
    keys = {id(row): _key(maker, index, row) for index, row in chosen}
    result = await batch(
        executable,
        [row for _, row in chosen],
        concurrency=min(bound, len(chosen)),
        progress=False,
        item_key=lambda row: keys[id(row)],
        run_options=options.get("run_options"),
        cache=options.get("cache"),
        runners=options.get("runners"),
        service_tier=options.get("service_tier"),
    )
    ran = result.items
    rates = _batch_rates(executable) if by_batch else None
    costs = [_cost(item.usage, rates) for item in ran]
    tokens = [item.usage.total_tokens for item in ran]
    requests = [item.usage.requests for item in ran]
    hits = [getattr(getattr(item.result, "report", None), "cache_hits", 0) for item in ran]
    latencies = [item.latency for item in ran if item.latency is not None]
    n = len(ran)
    cost = low = high = None
    if all(c is not None for c in costs):
        cost, low, high = _projected([float(c or 0.0) for c in costs], total)
    limits = [
        limit
        for agent in agents_of(executable)
        if (limit := getattr(agent.model, "max_concurrency", None))
    ]
    in_flight = min(bound, *limits)
    # The median: the sample's first items pay for starting up (pools, runners).
    latency = statistics.median(latencies) if latencies else 0.0
    demand = _demand(ran, total)
    planned = None if due is None else await _route(executable, ran, demand, total, due, options)
    guess = Estimate(
        items=total,
        sample=n,
        cost_usd=cost,
        cost_usd_low=low,
        cost_usd_high=high,
        tokens=round(statistics.fmean(tokens) * total),
        requests=round(statistics.fmean(requests) * total),
        seconds=total * latency / in_flight,
        cache_hits=round(statistics.fmean(hits) * total),
        provider_batch=by_batch,
        route=planned,
    )
    guess._answers.update({key_token(item.key): item for item in ran if item.ok})
    guess._demand = demand
    return guess


def _demand(ran: list[BatchItem], total: int) -> Demand | None:
    """The job's items as the sample measured them (None: no request was sent)."""
    requests = sum(item.usage.requests for item in ran)
    if not ran or requests == 0:
        return None
    return Demand(
        items=total,
        trips=requests / len(ran),
        input_tokens=sum(item.usage.input_tokens for item in ran) / requests,
        output_tokens=sum(item.usage.output_tokens for item in ran) / requests,
    )


async def _route(
    executable: Any,
    ran: list[BatchItem],
    demand: Demand | None,
    total: int,
    due: float,
    options: EstimateOptions,
) -> PlannedRoute:
    route = options.get("route", "cheapest")
    chosen = route if isinstance(route, Route) else Route()
    batching = options.get("provider_batch")
    tuned = batching if isinstance(batching, ProviderBatch) else ProviderBatch()
    budget = options.get("budget")
    return await preview(
        executable,
        chosen,
        deadline=due,
        demand=demand or Demand(total),
        concurrency=PROVIDER_BATCH_CONCURRENCY,
        overhead=tuned.gather_seconds + tuned.poll_seconds,
        budget=None if budget is None else budget.usd,
        seen=[sample for item in ran for sample in timings_of(item)],
        grace=grace_of(tuned),
    )


def estimate_sync(
    executable: Any,
    items: Any,
    sample: int = 50,
    concurrency: int | None = None,
    seed: int | None = None,
    **options: Unpack[EstimateOptions],
) -> Estimate:
    """`estimate` from synchronous code (with or without a running loop, as `batch_sync`)."""
    return run_sync(lambda: estimate(executable, items, sample, concurrency, seed, **options))


def _due(options: EstimateOptions) -> float | None:
    """The deadline (time.time()) an estimate plans a route for, if any."""
    deadline = options.get("deadline")
    if deadline is None:
        if options.get("route") is not None:
            raise ValueError("route= routes a job by its deadline: it needs deadline=")
        return None
    if options.get("service_tier") is not None:
        raise ValueError("service_tier= and deadline=: the route chooses each trip's tier")
    route = options.get("route", "cheapest")
    if route != "cheapest" and not isinstance(route, Route):
        raise TypeError(f'route= takes "cheapest" or raygent.Route(...), not {route!r}')
    return deadline_of(deadline)


def _key(maker: JobMaker, index: int, row: Any) -> Any:
    try:
        return maker.key_of(index, row)
    except Exception:
        return index  # the job fails the item for its key; its sample run is keyed apart


Rates = tuple[float, float]  # (input-side, output-side) batch price over the online one


def _batch_rates(executable: Any) -> Rates | None:
    """What the providers' batch APIs charge of the online rates, for the executable's
    models (the highest if they differ: an estimate errs high); None: a pricing unknown."""
    ratios: list[Rates] = []
    for agent in agents_of(executable):
        for model in models_of(agent):
            online, batched = pricing_of(model), pricing_of(model, batch=True)
            if online is None or batched is None:
                return None
            ratios.append((_ratio(batched.input_per_mtok, online.input_per_mtok),
                           _ratio(batched.output_per_mtok, online.output_per_mtok)))  # fmt: skip
    if not ratios:
        return None
    return max(r[0] for r in ratios), max(r[1] for r in ratios)


def _ratio(batched: float, online: float) -> float:
    return batched / online if online else 1.0


def _cost(usage: Usage, rates: Rates | None) -> float | None:
    """An item's cost, online or at the batch rates (input-side and output-side channels
    scale as `Pricing.for_batch` scales them)."""
    cost = usage.cost
    if rates is None or cost is None:
        return total_cost(cost)
    inward, outward = rates
    return (cost.input + cost.cached_input + cost.cache_write) * inward + (
        cost.output + cost.reasoning
    ) * outward


def _projected(values: list[float], total: int) -> tuple[float, float, float]:
    """The total over `total` items from a sample's values: the mean times the total,
    and its interval (t, finite-population corrected)."""
    n = len(values)
    mean = statistics.fmean(values)
    point = mean * total
    if n < 2 or n >= total:
        return point, point, point
    spread = statistics.stdev(values) / math.sqrt(n) * math.sqrt((total - n) / (total - 1))
    half = _t(CONFIDENCE, n - 1) * spread * total
    return point, max(0.0, point - half), point + half


def _t(confidence: float, dof: int) -> float:
    """Student's t quantile (two-sided `confidence`), by the Cornish-Fisher expansion of
    the normal quantile (within 0.3% of the table from 5 degrees of freedom)."""
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    v = float(dof)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
    )


async def _reservoir(
    items: Any, size: int, rng: random.Random
) -> tuple[int, list[tuple[int, Any]]]:
    """(how many items there are, a uniform sample of `size` of them with their
    positions, in input order)."""
    source = open_items(items)
    kept: list[tuple[int, Any]] = []
    count = 0
    try:
        rows = source.rows
        if isinstance(rows, AsyncIterator):
            async for row in rows:
                count = _keep(kept, row, count, size, rng)
        else:
            for row in rows:
                count = _keep(kept, row, count, size, rng)
    finally:
        await source.aclose()
    return count, sorted(kept, key=lambda pair: pair[0])


def _keep(kept: list[tuple[int, Any]], row: Any, count: int, size: int, rng: random.Random) -> int:
    if count < size:
        kept.append((count, row))
    else:
        slot = rng.randrange(count + 1)
        if slot < size:
            kept[slot] = (count, row)
    return count + 1

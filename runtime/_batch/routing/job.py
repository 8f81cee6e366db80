"""A job's route in the driver: planned before anything is sent (or refused with a
`DeadlineError`), then what it learns and counts as its batches come back and its items
end, and its `RouteSummary`.

`plan_job` reads the store's history for the model, weighs the ways the model supports
at their prices, and plans; `RouteJob` holds the running `RoutePolicy` (the attempts
follow it, on Ray too), re-plans the driver's cutoffs when a batch comes back, and adds
what it saw to the store when the job ends.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from ...errors import DeadlineError
from ...pricing import price_usage
from ...seams.batch import BatchItem, Deliver
from ...stores import InMemoryStore, TimingSample
from ..progress import Progress
from ..provider.options import ProviderBatchSummary
from ..report import trips_of
from ..sinks import key_token
from ._lognormal import LogNormal
from .learn import knowledge_of, timings_key, way_of_tier
from .offers import offers_of
from .options import PlannedRoute, Route, RouteSummary
from .planner import Demand, Refusal, RoutePlan, Situation, plan_route
from .policy import RoutePolicy
from .ways import DEFAULT_BATCH, BatchTime, Capacity, Way

__all__ = ["RouteJob", "plan_job", "preview", "timings_of"]

logger = logging.getLogger(__name__)
# With no store given, the timings live in this process's memory, shared by its jobs.
_PROCESS_TIMINGS = InMemoryStore()
_FLUSH_EVERY = 200  # samples added to the store in one call
_SHOW_EVERY = 0.25  # seconds between redraws of the route on the progress bar
_RELEARN_EVERY = 50  # online timings seen between two learnings (a batch's: each)
UNKNOWN_ITEMS = 1000  # a job whose input size is unknown is planned for this many


def _stamp(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc)


def _first_model(executable: Any) -> Any:
    model = getattr(executable, "model", None)
    return (getattr(model, "models", None) or [model])[0]


async def plan_job(
    executable: Any,
    route: Route,
    *,
    deadline: float,
    items: int | None,
    demand: Demand | None,
    concurrency: int,
    overhead: float,
    budget: float | None,
    grace: float = 0.0,
    now: float | None = None,
) -> RouteJob:
    """The route of a job due at `deadline` (time.time()), planned from the store's
    history; DeadlineError if no plan meets the deadline (and budget)."""
    model = _first_model(executable)
    if model is None:
        raise TypeError("deadline= needs an agent (its model's ways are weighed)")
    now = time.time() if now is None else now
    store = route.store if route.store is not None else _PROCESS_TIMINGS
    key = timings_key(model)
    try:
        history = await store.timings(key)
    except Exception as exc:  # a store that fails must not stop the job: the defaults
        logger.warning("deadline=: the timings store failed (%r): planning from defaults", exc)
        history = []
    known = demand or Demand(items if items is not None else UNKNOWN_ITEMS)
    if items is not None:
        known = replace(known, items=items)
    prior = DEFAULT_BATCH
    if route.batch_seconds is not None:
        prior = BatchTime(LogNormal(route.batch_seconds, DEFAULT_BATCH.turnaround.spread))
        prior = replace(prior, stall=DEFAULT_BATCH.stall)
    offers, priced = offers_of(model, known, route.ways)
    if not offers:
        raise DeadlineError(
            f"deadline=: {model!r} is reached by none of the ways {route.ways}",
            constraint="ways",
            earliest=None,
            least_budget=None,
        )
    limit = getattr(model, "rate_limit", None)
    capacity = Capacity(
        concurrency=min(concurrency, getattr(model, "max_concurrency", None) or concurrency),
        requests_per_minute=getattr(limit, "requests_per_minute", None),
        tokens_per_minute=getattr(limit, "tokens_per_minute", None),
    )
    situation = Situation(
        demand=known,
        offers=offers,
        knowledge=knowledge_of(history, output_tokens=known.output_tokens, batch_prior=prior),
        capacity=capacity,
        overhead=overhead,
        priced=priced,
        grace=grace,
    )
    left = deadline - now
    found = plan_route(situation, left, route.confidence, budget) if left > 0 else None
    if not isinstance(found, RoutePlan):
        raise _refused(found, deadline, now, budget)
    policy = RoutePolicy.of(found, situation, now)
    return RouteJob(route, policy, situation, store, key, model, history, prior)


async def preview(
    executable: Any,
    route: Route,
    *,
    deadline: float,
    demand: Demand,
    concurrency: int,
    overhead: float,
    budget: float | None,
    seen: list[TimingSample],
    grace: float = 0.0,
) -> PlannedRoute:
    """The plan of a job (an estimate's): what `plan_job` would plan, after adding to
    the store what the estimate's sample `seen` (its trips' timings); a refusal is
    told, not raised."""
    model = _first_model(executable)
    store = route.store if route.store is not None else _PROCESS_TIMINGS
    if seen and model is not None:
        try:
            await store.add_timings(timings_key(model), seen)
        except Exception as exc:
            logger.warning("estimate: the timings store failed (%r): not learnt", exc)
    due = _stamp(deadline)
    try:
        job = await plan_job(
            executable,
            route,
            deadline=deadline,
            items=demand.items,
            demand=demand,
            concurrency=concurrency,
            overhead=overhead,
            budget=budget,
            grace=grace,
        )
    except DeadlineError as exc:
        return PlannedRoute(deadline=due, confidence=route.confidence, refused=str(exc))
    plan = job.plan
    return PlannedRoute(
        deadline=due,
        confidence=plan.confidence,
        items=dict(plan.items),
        rescue=plan.rescue,
        cost=plan.cost,
        cost_high=plan.cost_high,
        online_cost=plan.online_cost,
        finish=plan.finish,
        finish_high=plan.finish_high,
    )


def timings_of(item: BatchItem) -> list[TimingSample]:
    """The timings an item's run shows: each online trip's latency by its tier."""
    now = time.time()
    seen = []
    for trip in trips_of(getattr(item.result, "report", None)):
        if trip.cache == "hit" or trip.via == "batch" or trip.timing.duration is None:
            continue
        seen.append(TimingSample(way_of_tier(trip.service_tier), trip.timing.duration, True, now))
    return seen


def _refused(
    refusal: Refusal | None, deadline: float, now: float, budget: float | None
) -> DeadlineError:
    due = _stamp(deadline).isoformat(timespec="seconds")
    if refusal is None:
        return DeadlineError(
            f"deadline= {due} has passed", constraint="deadline", earliest=None, least_budget=None
        )
    earliest = None if refusal.earliest is None else _stamp(now + refusal.earliest)
    said = "none within 30 days" if earliest is None else earliest.isoformat(timespec="seconds")
    if refusal.constraint == "budget":
        least = refusal.least_budget or 0.0
        return DeadlineError(
            f"deadline= {due} cannot be met within the budget (${budget:,.2f}): it needs"
            f" ${least:,.2f}; the budget meets a deadline of {said}",
            constraint="budget",
            earliest=earliest,
            least_budget=least,
        )
    return DeadlineError(
        f"deadline= {due} cannot be met by any way the model is reached; the earliest"
        f" deadline that can: {said}",
        constraint="deadline",
        earliest=earliest,
        least_budget=None,
    )


class RouteJob:
    """The running route of one job, in the driver (see the module's docstring)."""

    def __init__(
        self,
        route: Route,
        policy: RoutePolicy,
        situation: Situation,
        store: Any,
        key: str,
        model: Any,
        history: list[TimingSample],
        prior: BatchTime = DEFAULT_BATCH,
    ) -> None:
        self.route = route
        self.policy = policy
        self.situation = situation
        self.store = store
        self.key = key
        self.model = model
        self._history = list(history)
        self._prior = prior
        self._new: list[TimingSample] = []
        self.moves: Counter[str] = Counter()  # late batch, expired (the pool's)
        self.items: Counter[str] = Counter()
        self.trips: Counter[str] = Counter()
        self.flex_refused = 0
        self.paid_twice = 0
        self.paid_twice_cost: float | None = None
        self.cost: float | None = 0.0
        self.online_cost: float | None = 0.0
        self._batch_online = 0  # online trips of items by batch
        self._last_end = 0.0
        self._shown = 0.0

    @property
    def plan(self) -> RoutePlan:
        return self.policy.plan

    # -- what the pool tells ----------------------------------------------------------

    def batch_ended(self, seconds: float, ok: bool) -> None:
        """A provider batch came back after `seconds` (ok=False: late, stalled,
        expired); what is known of batches is learnt again."""
        self._note(TimingSample("batch", seconds, ok, time.time()))

    def moved(self, why: str, lines: int = 1) -> None:
        self.moves[why] += lines

    def answered_twice(self, cost: float | None) -> None:
        """A line sent online was answered by its batch too."""
        self.paid_twice += 1
        if cost is not None:
            self.paid_twice_cost = (self.paid_twice_cost or 0.0) + cost

    # -- what the items say ---------------------------------------------------------

    def delivering(self, deliver: Deliver, progress: Progress) -> Deliver:
        """`deliver`, each item counted by the route first (and shown on the bar)."""

        async def routed(item: BatchItem) -> None:
            self.item_ended(item)
            if progress.enabled and time.monotonic() - self._shown >= _SHOW_EVERY:
                self._shown = time.monotonic()
                progress.route(self.progress_text())
            await deliver(item)

        return routed

    def progress_text(self) -> str:
        """The route as the bar shows it: items by way, trips moved online."""
        ways = ", ".join(f"{n} {w}" for w, n in self.items.items() if n)
        moved = self._batch_online
        return f"route: {ways or 'waiting'}" + (f" · {moved} moved online" if moved else "")

    def item_ended(self, item: BatchItem) -> None:
        self._last_end = time.time()
        assigned = self.policy.way_of(key_token(item.key))
        trips = trips_of(getattr(item.result, "report", None))
        last: Way | None = None
        all_batch = bool(trips)
        for trip in trips:
            if trip.cache == "hit":
                continue
            way: Way = "batch" if trip.via == "batch" else way_of_tier(trip.service_tier)
            self.trips[way] += 1
            last = way
            if way != "batch":
                all_batch = False
                if assigned == "batch":
                    self._batch_online += 1
                if trip.timing.duration is not None:
                    self._note(TimingSample(way, trip.timing.duration, True, time.time()))
                self._price(trip.usage)
            for attempt in trip.attempts:
                if attempt.get("service_tier") == "flex" and attempt.get("fallback"):
                    self.flex_refused += 1
                    self._note(TimingSample("flex", 0.0, False, time.time()))
        if last is not None:
            self.items["batch" if all_batch else last] += 1

    def _price(self, usage: Any) -> None:
        if self.cost is not None:
            cost = usage.cost
            self.cost = None if cost is None else self.cost + cost.total
        if self.online_cost is not None:
            model = self.model
            online = price_usage(
                usage,
                provider=model.provider,
                model=model.name,
                declared=getattr(model, "pricing", None),
            ).cost
            self.online_cost = None if online is None else self.online_cost + online.total

    def _note(self, sample: TimingSample) -> None:
        self._new.append(sample)
        if sample.way == "batch" or len(self._new) % _RELEARN_EVERY == 0:
            self._learn()

    def _learn(self) -> None:
        """Plan the driver's cutoffs again from all that is known now."""
        situation = self.situation
        knowledge = knowledge_of(
            [*self._history, *self._new],
            output_tokens=situation.demand.output_tokens,
            batch_prior=self._prior,
        )
        self.situation = replace(situation, knowledge=knowledge)
        self.policy = RoutePolicy.of(self.policy.plan, self.situation, self.policy.start)

    # -- the end --------------------------------------------------------------------

    async def close(self, lines: ProviderBatchSummary) -> RouteSummary:
        """Add what was seen to the store; the summary (with what the job's batch lines
        cost, and would have online: its provider-batch summary)."""
        # Lines never answered (a stalled batch, cancelled) cost nothing.
        batch_cost, batch_online_cost = lines.cost or 0.0, lines.online_cost or 0.0
        new, self._new = self._new, []
        if new:
            try:
                for start in range(0, len(new), _FLUSH_EVERY):
                    await self.store.add_timings(self.key, new[start : start + _FLUSH_EVERY])
            except Exception as exc:
                logger.warning("deadline=: the timings store failed (%r): not learnt", exc)
        plan = self.plan
        moved = dict(self.moves)
        deadline_moves = self._batch_online - sum(self.moves.values())
        if deadline_moves > 0:
            moved["deadline"] = deadline_moves
        cost = _plus(_plus(self.cost, batch_cost), self.paid_twice_cost or 0.0)
        online = _plus(self.online_cost, batch_online_cost)
        last = self._last_end or None
        return RouteSummary(
            deadline=_stamp(self.policy.deadline),
            confidence=plan.confidence,
            planned=dict(plan.items),
            items=dict(self.items),
            trips=dict(self.trips),
            moved=moved,
            flex_refused=self.flex_refused,
            paid_twice=self.paid_twice,
            paid_twice_cost=self.paid_twice_cost,
            cost=cost,
            online_cost=online,
            met=None if last is None else last <= self.policy.deadline,
            finished=None if last is None else _stamp(last),
        )


def _plus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b

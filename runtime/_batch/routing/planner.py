"""The planner: the cheapest assignment of a job's items to ways that finishes by the
deadline with the stated confidence, within the budget; or, before anything is spent,
which constraint cannot be met and what would be. Pure: times are seconds from the
job's start, passed in; no clock, no I/O.

The model, item by item (a job's items are alike: what differs is their way):

- an item **by batch** makes its trips as lines of provider batches, one round a trip
  (the pool's gathering and polling, then the batch's turnaround), and is *rescued*: if
  its batch is not back by the `cutoff`, its lines go online (the batch is cancelled),
  the cutoff set so that every batch item can still be answered online by the deadline
  (`rescue`: the cheapest online way for which that holds). Expected cost: the batch
  price if back by the cutoff, else the rescue's. When no online way could rescue the
  batch items in time (more of them than online capacity can answer), batch is used
  bare, only where it alone meets the deadline at the confidence;
- an item **online** (flex, standard, priority) makes its trips one after another; the
  online items share the job's concurrency and rate limits. Flex refusals go to
  standard (priced as such). Online items must be done by the cutoff, so that a rescue
  finds the capacity free.

Items by batch and online mix: the plan tries each share of items by batch (a grid, the
ends exact) with each rescue way, fills the rest with the cheapest mix of at most two
online ways that fits, and keeps the cheapest in expectation whose cost at the
confidence (rescues counted when they are likely) is within the budget.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from ._lognormal import LogNormal
from .ways import ONLINE, Capacity, Knowledge, Way

__all__ = [
    "MARGIN",
    "MIN_ON_TIME",
    "RESCUE_START",
    "Demand",
    "Offer",
    "Refusal",
    "RoutePlan",
    "Situation",
    "plan_route",
    "trip_time",
]

_GRID = 20  # shares of items by batch tried: 0, 1/20, ..., 1
_LONGEST = 30 * 24 * 3600.0  # the latest deadline a refusal looks for (30 days)
MARGIN = 0.03  # of the deadline, kept back for what the model leaves out
# Seconds a rescue takes to start: the first online requests of processes that sent
# none yet (connections, on Ray a lease of the endpoint from the gateway).
RESCUE_START = 1.0
# An item goes by batch only if its batch is at least this likely back before its cutoff:
# a batch that would mostly be rescued saves little and delays every item it holds.
MIN_ON_TIME = 0.8
# A plan whose batches are rescued (done by the deadline even if every batch stalls) is
# preferred to a cheaper one whose batches are not, unless that saves more than this.
SAFETY = 0.05


@dataclass(frozen=True, slots=True)
class Demand:
    """The job's items: how many, the model trips each makes (expected), and the tokens
    of a trip (input, output)."""

    items: int
    trips: float = 1.0
    input_tokens: float = 1000.0
    output_tokens: float = 300.0

    @property
    def rounds(self) -> int:
        """The trips an item makes one after another (by batch, one round each)."""
        return max(1, math.ceil(self.trips - 1e-9))


@dataclass(frozen=True, slots=True)
class Offer:
    """A way the model supports, what a trip costs by it (USD; relative when `priced`
    is False on the situation), and the service tier it asks for (online ways)."""

    way: Way
    price: float
    tier: str | None = None


@dataclass(frozen=True, slots=True)
class Situation:
    """Everything the planner weighs. `overhead`: seconds a batch round adds to the
    batch's own turnaround (gathering the lines, the poll that sees it end). `grace`:
    seconds a late batch is given to end once cancelled (what it answered kept) before
    its lines go online anyway. `priced`: the offers' prices are USD (else relative: no
    budget can be checked)."""

    demand: Demand
    offers: tuple[Offer, ...]
    knowledge: Knowledge
    capacity: Capacity
    overhead: float = 0.0
    priced: bool = True
    grace: float = 0.0

    def offer(self, way: Way) -> Offer | None:
        return next((o for o in self.offers if o.way == way), None)


@dataclass(frozen=True)
class RoutePlan:
    """A job's route. `items`: items by way ("batch": by provider batch, rescued online
    at `rescue` past `cutoff`, seconds from the start). `cost`: expected USD (None:
    unpriced); `cost_high`: at the confidence (rescues counted when likely);
    `online_cost`: the same items all at standard. `finish` / `finish_high`: when the
    job is expected done, and done at the confidence (seconds from the start).
    `on_time`: the probability an item by batch is back before its cutoff."""

    deadline: float
    confidence: float
    items: Mapping[Way, int]
    rescue: Way | None
    cutoff: float | None
    cost: float | None
    cost_high: float | None
    online_cost: float | None
    finish: float
    finish_high: float
    on_time: float = 1.0
    tiers: Mapping[Way, str | None] = field(default_factory=dict)

    def share(self, way: Way) -> float:
        total = sum(self.items.values())
        return self.items.get(way, 0) / total if total else 0.0


@dataclass(frozen=True)
class Refusal:
    """Why no plan meets the job's constraints: `constraint` is "deadline" (no way
    finishes in time: `earliest` is the earliest deadline one would, seconds from the
    start, None: none within 30 days) or "budget" (`least_budget` is the least the
    deadline can be met for; `earliest` the earliest deadline the budget meets, None:
    none within 30 days)."""

    constraint: str
    earliest: float | None = None
    least_budget: float | None = None


@dataclass(frozen=True, slots=True)
class _Candidate:
    items: dict[Way, int]
    rescue: Way | None
    cutoff: float | None
    cost: float
    cost_high: float
    finish: float
    finish_high: float
    on_time: float


def plan_route(
    situation: Situation, deadline: float, confidence: float = 0.95, budget: float | None = None
) -> RoutePlan | Refusal:
    """The cheapest plan of `situation` done by `deadline` (seconds from now) with
    `confidence`, within `budget` (USD); else the `Refusal` saying why."""
    if not 0.5 <= confidence < 1:
        raise ValueError(f"confidence must be within [0.5, 1), not {confidence!r}")
    within = budget if situation.priced else None
    best = _cheapest(situation, deadline, confidence, within)
    if best is None:
        if within is not None and _cheapest(situation, deadline, confidence, None) is not None:
            least = _cheapest(situation, deadline, confidence, None)
            assert least is not None
            later = _earliest(situation, confidence, within, start=deadline)
            return Refusal("budget", earliest=later, least_budget=least.cost_high)
        return Refusal("deadline", earliest=_earliest(situation, confidence, None, start=0.0))
    standard = situation.offer("standard")
    demand = situation.demand
    online = standard.price * demand.trips * demand.items if standard is not None else None
    return RoutePlan(
        deadline=deadline,
        confidence=confidence,
        items={w: n for w, n in best.items.items() if n},
        rescue=best.rescue,
        cutoff=best.cutoff,
        cost=best.cost if situation.priced else None,
        cost_high=best.cost_high if situation.priced else None,
        online_cost=online if situation.priced else None,
        finish=best.finish,
        finish_high=best.finish_high,
        on_time=best.on_time,
        tiers={o.way: o.tier for o in situation.offers},
    )


def _earliest(
    situation: Situation, confidence: float, budget: float | None, start: float
) -> float | None:
    """The earliest deadline after `start` with a plan (within `budget`), to a percent."""
    if _cheapest(situation, _LONGEST, confidence, budget, coarse=True) is None:
        return None
    low, high = start, max(start * 2, 1.0)
    while _cheapest(situation, high, confidence, budget, coarse=True) is None:
        low, high = high, high * 2
    while high - low > 0.01 * high:
        middle = (low + high) / 2
        if _cheapest(situation, middle, confidence, budget, coarse=True) is None:
            low = middle
        else:
            high = middle
    return high


def _cheapest(
    situation: Situation,
    deadline: float,
    confidence: float,
    budget: float | None,
    *,
    coarse: bool = False,
) -> _Candidate | None:
    best: _Candidate | None = None
    safe: _Candidate | None = None  # the cheapest whose batches (if any) are rescued
    for candidate in _candidates(situation, deadline, confidence, coarse):
        if budget is not None and candidate.cost_high > budget * (1 + 1e-9):
            continue
        if best is None or (candidate.cost, candidate.finish) < (best.cost, best.finish):
            best = candidate
        bare = "batch" in candidate.items and candidate.rescue is None
        key = (candidate.cost, candidate.finish)
        if not bare and (safe is None or key < (safe.cost, safe.finish)):
            safe = candidate
    if best is not None and safe is not None and safe.cost <= best.cost * (1 + SAFETY) + 1e-12:
        return safe
    return best


def _candidates(
    situation: Situation, deadline: float, confidence: float, coarse: bool
) -> Iterator[_Candidate]:
    items = situation.demand.items
    if items <= 0:
        yield _Candidate({}, None, None, 0.0, 0.0, 0.0, 0.0, 1.0)
        return
    end = deadline * (1 - MARGIN)
    shares: Sequence[int] = [0]
    if situation.offer("batch") is not None:
        steps = 4 if coarse else _GRID
        shares = sorted({round(items * k / steps) for k in range(steps + 1)})
    rescues: list[Way] = [o.way for o in situation.offers if o.way in ONLINE]
    for by_batch in shares:
        if not by_batch:
            found = _with_batch(situation, 0, None, end, confidence)
            if found is not None:
                yield found
            continue
        for rescue in rescues:
            found = _with_batch(situation, by_batch, rescue, end, confidence)
            if found is not None:
                yield found
        # Batch alone, where it meets the deadline at the confidence by itself (chosen
        # over a rescued plan only when that saves more than `SAFETY`).
        found = _with_batch(situation, by_batch, None, end, confidence)
        if found is not None:
            yield found


def _with_batch(
    situation: Situation, by_batch: int, rescue: Way | None, end: float, confidence: float
) -> _Candidate | None:
    demand = situation.demand
    online_items = demand.items - by_batch
    cutoff: float | None = None
    batch_cost = batch_high = 0.0
    batch_finish = batch_high_finish = 0.0
    on_time = 1.0
    if by_batch:
        batch = situation.offer("batch")
        assert batch is not None
        if rescue is not None:
            need, need_median = _online_need(situation, {rescue: by_batch}, confidence)
            need += situation.grace + RESCUE_START
            need_median += situation.grace + RESCUE_START
            cutoff = end - need
            if cutoff <= 0:
                return None
            on_time = _batch_on_time(situation, cutoff)
            if on_time < MIN_ON_TIME:
                return None
            rescued = _trip_price(situation, rescue) * demand.trips
            price = batch.price * demand.trips
            batch_cost = by_batch * (on_time * price + (1 - on_time) * rescued)
            batch_high = by_batch * (price if 1 - on_time <= 1 - confidence else rescued)
            batch_finish = _batch_finish(situation, 0.5, cutoff, need_median)
            batch_high_finish = _batch_finish(situation, confidence, cutoff, need)
        else:
            on_time = _batch_on_time(situation, end)
            if on_time < confidence:
                return None
            batch_cost = batch_high = by_batch * batch.price * demand.trips
            batch_finish = _batch_finish(situation, 0.5, end, 0.0)
            batch_high_finish = _batch_finish(situation, confidence, end, 0.0)
    mix = _online_mix(situation, online_items, cutoff if cutoff is not None else end, confidence)
    if mix is None:
        return None
    ways, online_cost, finish, finish_high = mix
    if by_batch:
        ways["batch"] = by_batch
    return _Candidate(
        items=ways,
        rescue=rescue if by_batch else None,
        cutoff=cutoff,
        cost=batch_cost + online_cost,
        cost_high=batch_high + online_cost,
        finish=max(batch_finish, finish),
        finish_high=max(batch_high_finish, finish_high),
        on_time=on_time,
    )


def _batch_round(situation: Situation) -> tuple[int, LogNormal, float]:
    """An item's rounds by batch, the time of their turnarounds together, and the
    fixed seconds they add (gathering, polling)."""
    rounds = situation.demand.rounds
    turnaround = situation.knowledge.batch.turnaround.sum_of(rounds)
    return rounds, turnaround, rounds * situation.overhead


def _batch_on_time(situation: Situation, by: float) -> float:
    """The probability an item's batch rounds are all back by `by` seconds."""
    rounds, turnaround, fixed = _batch_round(situation)
    alive = (1 - situation.knowledge.batch.stall) ** rounds
    return alive * turnaround.cdf(by - fixed)


def _batch_finish(situation: Situation, confidence: float, cutoff: float, rescue: float) -> float:
    """When the batch items are done at `confidence`: by their batches, else rescued
    (past the cutoff, in `rescue` seconds)."""
    rounds, turnaround, fixed = _batch_round(situation)
    alive = (1 - situation.knowledge.batch.stall) ** rounds
    if _batch_on_time(situation, cutoff) >= confidence and alive > 0:
        return fixed + turnaround.quantile(min(confidence / alive, 1 - 1e-9))
    return cutoff + rescue


def _trip_price(situation: Situation, way: Way) -> float:
    """What a trip costs by an online way, flex's refusals (sent at standard) counted."""
    offer = situation.offer(way)
    assert offer is not None
    if way != "flex":
        return offer.price
    refused = situation.knowledge.latency("flex").refused
    standard = situation.offer("standard")
    fallback = standard.price if standard is not None else offer.price
    return (1 - refused) * offer.price + refused * fallback


def trip_time(situation: Situation, way: Way) -> LogNormal:
    """One trip's latency by a way; a flex trip refused is sent again at standard."""
    known = situation.knowledge.latency(way)
    if way != "flex" or known.refused <= 0:
        return known.latency
    standard = situation.knowledge.latency("standard").latency
    refused = known.refused
    mean = known.latency.mean + refused * standard.mean
    flex_var = (math.exp(known.latency.spread**2) - 1) * known.latency.mean**2
    std_var = (math.exp(standard.spread**2) - 1) * standard.mean**2
    variance = flex_var + refused * std_var + refused * (1 - refused) * standard.mean**2
    return LogNormal.of_moments(mean, variance)


def _online_need(
    situation: Situation, items: Mapping[Way, int], confidence: float
) -> tuple[float, float]:
    """Seconds to answer `items` online from now: at the confidence, and the median
    (the capacity they keep busy, then the last item's trips one after another)."""
    used = [w for w, n in items.items() if n > 0]
    if not used:
        return 0.0, 0.0
    demand = situation.demand
    times = {w: trip_time(situation, w) for w in used}
    trips = {w: items[w] * demand.trips for w in used}
    busy = situation.capacity.seconds(
        trips, {w: t.mean for w, t in times.items()}, demand.input_tokens + demand.output_tokens
    )
    chains = [t.sum_of(demand.trips) for t in times.values()]
    high = busy + max(c.quantile(confidence) for c in chains)
    median = busy + max(c.median for c in chains)
    return high, median


def _online_mix(
    situation: Situation, items: int, end: float, confidence: float
) -> tuple[dict[Way, int], float, float, float] | None:
    """The cheapest mix of at most two online ways answering `items` by `end`: (items
    by way, cost, finish median, finish at the confidence); None if none fits."""
    if items <= 0:
        return {}, 0.0, 0.0, 0.0
    ways = sorted(
        (o.way for o in situation.offers if o.way in ONLINE),
        key=lambda w: _trip_price(situation, w),
    )
    best: tuple[dict[Way, int], float, float, float] | None = None
    for i, cheap in enumerate(ways):
        for dear in ways[i:]:
            found = _pair(situation, cheap, dear, items, end, confidence)
            if found is not None and (best is None or found[1] < best[1]):
                best = found
    return best


def _pair(
    situation: Situation, cheap: Way, dear: Way, items: int, end: float, confidence: float
) -> tuple[dict[Way, int], float, float, float] | None:
    def counts(n: int) -> dict[Way, int]:
        return {cheap: items} if cheap == dear else {cheap: n, dear: items - n}

    def fits(n: int) -> tuple[float, float] | None:
        need, median = _online_need(situation, counts(n), confidence)
        return (need, median) if need <= end else None

    low = items  # the most items the cheaper way can take
    if cheap != dear and fits(items) is None:
        if fits(0) is None:
            return None
        low, high = 0, items
        while high - low > 1:
            middle = (low + high) // 2
            if fits(middle) is not None:
                low = middle
            else:
                high = middle
    need = fits(low)
    if need is None:
        return None
    mix = {w: n for w, n in counts(low).items() if n}
    cost = situation.demand.trips * sum(n * _trip_price(situation, w) for w, n in mix.items())
    return mix, cost, need[1], need[0]

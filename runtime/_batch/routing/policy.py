"""A job's route as it runs: which way each item goes, which way each of its trips goes
as time passes, and when a batch's lines must go online. Pure and clock-injected: every
decision takes `now` (time.time()), so it is tested without waiting.

The policy is made in the driver from a `RoutePlan` and travels with the job (to the Ray
runners too: it is a small frozen value). Items are given their way by a hash of their
key, in the plan's shares, so an item keeps its way across attempts, resumes and a
second run of the job.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from ._lognormal import LogNormal
from .planner import MARGIN, MIN_ON_TIME, RESCUE_START, RoutePlan, Situation, trip_time
from .ways import WAYS, Way

__all__ = ["RoutePolicy"]


@dataclass(frozen=True)
class RoutePolicy:
    """The running route (see the module's docstring). `start` and `deadline` are
    time.time(); `cutoffs[r - 1]`: seconds after `start` past which a line with `r`
    trips left (this one included) cannot wait for its batch any more."""

    start: float
    deadline: float
    plan: RoutePlan
    shares: tuple[tuple[Way, float], ...]  # ways and their cumulative shares of items
    cutoffs: tuple[float, ...] = ()
    round_time: LogNormal = field(default_factory=lambda: LogNormal(0.0))
    overhead: float = 0.0
    alive: float = 1.0  # a batch round's chance not to stall

    @classmethod
    def of(cls, plan: RoutePlan, situation: Situation, start: float) -> RoutePolicy:
        """The policy of `plan`, made for `situation`, the job starting at `start`."""
        total = sum(plan.items.values())
        shares: list[tuple[Way, float]] = []
        running = 0
        for way in WAYS:
            running += plan.items.get(way, 0)
            if plan.items.get(way):
                shares.append((way, running / total))
        cutoffs: tuple[float, ...] = ()
        if plan.rescue is not None and plan.cutoff is not None:
            cutoffs = _cutoffs(plan, situation)
        batch = situation.knowledge.batch
        return cls(
            start=start,
            deadline=start + plan.deadline,
            plan=plan,
            shares=tuple(shares) or (("standard", 1.0),),
            cutoffs=cutoffs,
            round_time=batch.turnaround,
            overhead=situation.overhead,
            alive=1.0 - batch.stall,
        )

    def way_of(self, token: str) -> Way:
        """The way of the item whose key's token is `token` (stable: a hash of it)."""
        digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
        point = int.from_bytes(digest, "big") / 2**64
        for way, upto in self.shares:
            if point < upto:
                return way
        return self.shares[-1][0]

    def cutoff(self, trip: int) -> float | None:
        """time.time() past which trip number `trip`'s line (of an item by batch) goes
        online: its batch is late (None: never, a batch not rescued)."""
        if not self.cutoffs:
            return None
        left = max(1, len(self.cutoffs) - trip)
        return self.start + self.cutoffs[min(left, len(self.cutoffs)) - 1]

    def trip_way(self, way: Way, trip: int, now: float) -> tuple[Way, str | None]:
        """The way trip number `trip` of an item of `way` goes at `now`, and why it
        moved (None: it did not). An item by batch sends its trip by batch while its
        batch is likely back before the trip's cutoff, else by the rescue way."""
        if way != "batch":
            return way, None
        cutoff = self.cutoff(trip)
        rescue = self.plan.rescue
        if cutoff is None or rescue is None:
            return "batch", None
        chance = self.alive * self.round_time.cdf(cutoff - now - self.overhead)
        if chance >= MIN_ON_TIME:
            return "batch", None
        return rescue, "deadline"

    @property
    def policy(self) -> RoutePolicy:
        """Itself: what an attempt follows is any holder of a current `policy` (the
        driver's `RouteJob`, re-planned as batches come back; on a Ray runner, the
        policy the job started with)."""
        return self

    def tier(self, way: Way) -> str | None:
        """The service tier an online way asks for (None: the run's own)."""
        return self.plan.tiers.get(way)

    @property
    def rescue(self) -> Way:
        """Where an item by batch goes online (late, expired, a fallback): the plan's
        rescue, else standard."""
        return self.plan.rescue or "standard"


def _cutoffs(plan: RoutePlan, situation: Situation) -> tuple[float, ...]:
    """Seconds after the start past which a line with r trips left (r = 1, 2, ...) goes
    online: the deadline (less its margin) less what rescuing the batch items' r trips
    takes (the capacity they keep busy, then one item's r trips at the confidence), the
    grace a late batch is given to end once cancelled, and the rescue's start."""
    assert plan.rescue is not None
    demand = situation.demand
    rescue = plan.rescue
    by_batch = plan.items.get("batch", 0)
    latency = trip_time(situation, rescue)
    tokens = demand.input_tokens + demand.output_tokens
    end = plan.deadline * (1 - MARGIN)
    cutoffs = []
    for left in range(1, demand.rounds + 1):
        trips: Mapping[Way, float] = {rescue: by_batch * left}
        busy = situation.capacity.seconds(trips, {rescue: latency.mean}, tokens)
        chain = latency.sum_of(left).quantile(plan.confidence)
        cutoffs.append(end - busy - chain - situation.grace - RESCUE_START)
    return tuple(cutoffs)

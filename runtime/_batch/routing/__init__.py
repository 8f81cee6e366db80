"""Routing by deadline and price: `raygent.batch(..., deadline=)` sends each item (and
each of its trips) the cheapest way that still finishes the job by the deadline with the
route's confidence: provider batch, flex, standard or priority online.

What lives where:
- `ways`: the ways, what is known of their times (the documented defaults), capacity;
- `_lognormal`: the times, as lognormals, and their sums;
- `planner`: the plan (pure: times passed in): items by way, the batch's cutoff and
  rescue, the cost and finish expected; or a `Refusal` saying which constraint fails
  and what would be met;
- `policy`: the plan as the job runs it (clock injected): each item's way by a hash of
  its key, each trip's way as time passes, each batch's cutoff;
- `learn`: the ways' times from the store's history (`raygent.stores.TimingStore`);
- `offers`: the ways a model supports and what a trip costs by each;
- `options`: `Route` (the public options) and `RouteSummary` (the report's section);
- `job`: the job's route in the driver: planned or refused before anything is sent,
  learning as batches come back and items end (imported by the batch call, not here:
  it reads the report, whose section `options` defines).

Part of batch: may import what `raygent._batch` may (the base, budgets and pricing, the
stores' `TimingStore`) and the batch's own provider batches, report and sinks; never
agents or flows. `planner`, `policy`, `ways` and `_lognormal` import nothing but each
other: the plan is pure.
"""

from .options import Route, RouteSummary
from .planner import Demand, Offer, Refusal, RoutePlan, Situation, plan_route
from .policy import RoutePolicy
from .ways import Capacity, Knowledge, Way

__all__ = [
    "Capacity",
    "Demand",
    "Knowledge",
    "Offer",
    "Refusal",
    "Route",
    "RoutePlan",
    "RoutePolicy",
    "RouteSummary",
    "Situation",
    "Way",
    "plan_route",
]

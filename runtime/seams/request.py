"""A model request as one typed value: what is sent, to which model, and its context.

A run's trip (or a compaction's summary call) builds one `ModelRequest` and hands it to
its request path (`request_path`); every link and the access layer under them take it
and pass it on, changed only where a step changes it (a fallback's split names the model
and its route; the route marks a line of a provider batch; the tier step asks for the
fallback tier). Nothing about a request travels beside it: not in a context variable,
not in an attribute looked up on the model.

These are built for every request: frozen dataclasses with slots, made by hand (no
`dataclasses.replace`, which inspects the fields at every call).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..abort import AbortSignal
from ..budgets import Budget
from ..messages import Message
from ..models.contract import (
    Model,
    ModelOptions,
    ModelResponse,
    StreamChunk,
    Tier,
    as_provider_model,
)
from ..rates import RateLimit

__all__ = [
    "NO_CONTEXT",
    "ONLINE",
    "ModelAccess",
    "ModelRequest",
    "RequestContext",
    "RequestRecord",
    "Route",
    "Tenant",
]


@dataclass(slots=True)
class RequestRecord:
    """What happened to a request (to every request of one trip: a fallback's models
    share it), filled in by the access layer: seconds it waited for its rate, the 429s
    it met (every send's), and how many times it was sent."""

    rate_wait: float = 0.0
    throttled: int = 0
    sends: int = 0


@dataclass(frozen=True, slots=True)
class Route:
    """How a request goes: as a line of a provider batch or online (`batch`), which model
    of a fallback it is (`position`, 0: the first), and whether a 429 goes back at once
    (`fail_fast`: a fallback's model with another after it, which the 429 should lead
    to) rather than being sent again after the wait."""

    batch: bool = False
    position: int = 0
    fail_fast: bool = False


ONLINE = Route()


@dataclass(frozen=True, eq=False, slots=True)
class Tenant:
    """Who a request is for, when several share the cluster (`seams.tenants`): `name`;
    `weight`, its share of each endpoint's bound and rate while others wait too (a
    tenant of weight 3 is let through three times as often as one of weight 1); its
    own `budget` (`raygent.Budget`, shared by all its runs: on Ray, cluster-wide), and
    its own `rate_limit` and `max_concurrency` (None: only the endpoints' limits)."""

    name: str
    weight: float = 1.0
    budget: Budget | None = None
    rate_limit: RateLimit | None = None
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a tenant's name is a non-empty str, not {self.name!r}")
        if not self.weight > 0:
            raise ValueError(f"tenant {self.name!r}: weight must be > 0, not {self.weight!r}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(
                f"tenant {self.name!r}: max_concurrency must be >= 1, not {self.max_concurrency}"
            )
        if self.budget is not None and not isinstance(self.budget, Budget):
            raise TypeError(f"tenant {self.name!r}: budget= takes raygent.Budget(...)")
        if self.rate_limit is not None and not isinstance(self.rate_limit, RateLimit):
            raise TypeError(f"tenant {self.name!r}: rate_limit= takes raygent.RateLimit(...)")


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Where a request belongs: its run, session, batch job and `Tenant`, the trip it is
    part of, its deadline (`time.time()`, None: none) and route, and its `record` (None:
    nobody reads what happened)."""

    run_id: str | None = None
    session_id: str | None = None
    job: str | None = None
    tenant: Tenant | None = None
    trip: int = 0
    deadline: float | None = None
    route: Route = ONLINE
    record: RequestRecord | None = None

    def routed(self, route: Route) -> RequestContext:
        return RequestContext(
            self.run_id,
            self.session_id,
            self.job,
            self.tenant,
            self.trip,
            self.deadline,
            route,
            self.record,
        )


NO_CONTEXT = RequestContext()


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One request to one model (or to a composite one, before the path splits it)."""

    model: Model
    messages: Sequence[Message]
    options: ModelOptions
    signal: AbortSignal | None = None
    context: RequestContext = NO_CONTEXT

    @property
    def route(self) -> Route:
        return self.context.route

    @property
    def tier(self) -> str | Tier | None:
        """The service tier it asks for: its options', else its model's."""
        tier = self.options.service_tier
        if tier is None:
            declared = as_provider_model(self.model)
            tier = declared.default_tier() if declared is not None else None
        return tier

    def to(self, model: Model, route: Route) -> ModelRequest:
        """This request to `model` (a fallback's), going by `route`."""
        return ModelRequest(
            model, self.messages, self.options, self.signal, self.context.routed(route)
        )

    def going(self, route: Route) -> ModelRequest:
        """This request, going by `route`."""
        return ModelRequest(
            self.model, self.messages, self.options, self.signal, self.context.routed(route)
        )

    def with_options(self, options: ModelOptions) -> ModelRequest:
        return ModelRequest(self.model, self.messages, options, self.signal, self.context)


class ModelAccess(Protocol):
    """Sends a model request and gives its reply or its stream: a link of a run's request
    path, or the backend's access layer under them (`seams.access`)."""

    async def complete(self, request: ModelRequest) -> ModelResponse: ...

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]: ...

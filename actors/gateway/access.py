"""Model access on Ray: HTTP from the process that runs the agent, inside a leased slice
of the endpoint's bound.

A provider endpoint's bound (`max_concurrency`, declared on the model) and each model's
rate (`rate_limit`: requests, tokens, input and output tokens per minute, keyed by the
endpoint and the model's name as providers key them, learnt from the replies' headers)
are owned by a model gateway: a named,
detached async actor (`raygent-gw-<i>` in the backend's namespace; one for the whole
cluster unless `RayOptions.replicas` splits every bound over several). The gateway
sends no requests. Each process that runs agents (drivers, batch runners) holds a lease
per endpoint (`lease.EndpointLease`), sends its requests itself through the shared
HTTP transport inside its slice, and hears from the gateway when its slice grows or
shrinks, when every holder must pause for a Retry-After, and once per heartbeat. So a
trip costs no remote call and no conversation crosses Ray, and the bound still holds
across every driver and node: a slice is granted from what the others do not hold, and
a process that dies loses its slice when its lease expires. A request takes a slot of
its endpoint's lease, then its rate budget from its model's rate lease (`rate_budget`).

What admits a request here (`RayAdmissions`, with `sends.admitted`) is all that is Ray's
own: the send, its 429s, the tier's fallback and the request's record are the core's
access layer (`raygent.backend.AccessLayer`), the same as in-process. Models that declare
no limits (the in-process test doubles `ScriptedModel`, `FunctionModel`) are not
bounded, as on the local backend.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import uuid
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from raygent.backend import (
    AccessLayer,
    Limits,
    Model,
    ModelRequest,
    ProviderConnectionError,
    TenantAdmissions,
    as_provider_model,
)

from .._options import RayOptions
from .._ray import job_id, named_actor, reconstructed
from .actor import Gateway
from .endpoint_ledger import Bounds, Grant, Report, partition
from .lease import EndpointLease, GatewayUnavailable
from .rate_budget import Rates
from .sends import LeasedAdmission, admitted

__all__ = ["RayAdmissions", "RayModelAccess", "endpoint_digest", "gateway_key", "gateway_names"]


def gateway_key(model: Model) -> Hashable | None:
    """What a bound is shared by: the model's endpoint (provider, base URL, key
    fingerprint). None for a model that declares no limits (it is not bounded)."""
    provider = as_provider_model(model)
    return None if provider is None else provider.limits().endpoint


def endpoint_digest(key: Hashable) -> str:
    """A gateway key as it travels (the same in every process)."""
    return hashlib.sha256(repr(key).encode()).hexdigest()[:16]


def gateway_names(replicas: int) -> list[str]:
    """The gateways every endpoint's bound is split over (each holds its share)."""
    return [f"raygent-gw-{i}" for i in range(replicas)]


def gateway_handle(options: RayOptions, name: str) -> Any:
    """This process's handle on a gateway, looked up (or the actor made) once per job."""
    options.connect()
    cache_key = (job_id(), options.namespace, name)
    handle = _handles.get(cache_key)
    if handle is None:
        # Detached: it outlives the driver that made it (it ends itself when idle).
        handle = _handles[cache_key] = named_actor(
            _GatewayActor,
            name,
            options.namespace,
            options.lease_ttl,
            options.gateway_idle_timeout,
        )
    return handle


def forget_handle(options: RayOptions, name: str) -> None:
    _handles.pop((job_id(), options.namespace, name), None)


class _GatewayActor(Gateway):
    """The gateway as a Ray actor: it knows when Ray restarted it, and ends itself when
    idle (no restart: the next user makes a new one)."""

    def __init__(self, lease_ttl: float, idle_timeout: float) -> None:
        super().__init__(
            lease_ttl, idle_timeout, restarted=reconstructed(), on_idle=_end_this_actor
        )


def _end_this_actor() -> None:
    ray.kill(ray.get_runtime_context().current_actor, no_restart=True)


class _RayChannel:
    """A lease slice's way to its gateway replica."""

    def __init__(
        self, options: RayOptions, name: str, key: str, bounds: Bounds, holder_id: str
    ) -> None:
        self.options, self.name, self.key = options, name, key
        self.bounds, self.holder_id = bounds, holder_id

    async def sync(self, report: Report, wait: bool) -> Grant:
        handle = gateway_handle(self.options, self.name)
        try:
            grant: Grant = await handle.sync.remote(
                self.key, self.bounds, self.holder_id, report, wait
            )
        except (RayActorError, RayTaskError) as exc:
            # Dead, restarting, or closing because idle: look it up (or make it) anew.
            forget_handle(self.options, self.name)
            raise GatewayUnavailable(f"{type(exc).__name__}") from None
        return grant

    async def release(self, returned: Rates) -> None:
        try:
            await gateway_handle(self.options, self.name).release.remote(
                self.key, self.holder_id, returned
            )
        except (RayActorError, RayTaskError):
            forget_handle(self.options, self.name)

    def release_nowait(self, returned: Rates) -> None:
        handle = _handles.get((job_id(), self.options.namespace, self.name))
        if handle is not None:
            handle.release.remote(self.key, self.holder_id, returned)


def declared_limits(limits: Limits) -> tuple[Any, ...]:
    """The limits a model declares: its endpoint's concurrency, then its rate (its
    `rate_limit`'s four rates) and burst."""
    rate = limits.rate_limit
    if rate is None:
        return (limits.max_concurrency, None, None, None, None, 1.0)
    return (
        limits.max_concurrency,
        rate.requests_per_minute,
        rate.tokens_per_minute,
        rate.input_tokens_per_minute,
        rate.output_tokens_per_minute,
        rate.burst or 1.0,
    )


def rate_key(model: Model) -> Hashable | None:
    """What a model's rate is held under, as providers key it: the endpoint and the
    model (its `Limits.rate_key`). None for a model that declares no limits."""
    provider = as_provider_model(model)
    return None if provider is None else ("rate", provider.limits().rate_key)


def _bounds(limits: Limits, replicas: int) -> list[Bounds]:
    """The endpoint's concurrency bound, split over the gateway replicas (never
    multiplied)."""
    declared: int | None = limits.max_concurrency or None
    if declared is None:
        return [Bounds()] * replicas
    return [Bounds(share) for share in partition(declared, replicas)]  # never more than slots


def _rate_bounds(limits: Limits, replicas: int) -> list[Bounds]:
    """The model's rate, split over the gateway replicas, learnt from the replies (a
    configured rate is the ceiling)."""
    _, *rates, burst = declared_limits(limits)
    rpm, tpm, itpm, otpm = (rate / replicas if rate else None for rate in rates)
    return [Bounds(None, rpm, tpm, itpm, otpm, burst, 1 / replicas, learn=True)] * replicas


# Per process: gateway handles by (job, namespace, name); leases per event loop.
_handles: dict[tuple[str, str, str], Any] = {}
_leases: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[Hashable, ...], EndpointLease]
] = weakref.WeakKeyDictionary()


class RayAdmissions:
    """The Ray backend's counters (`raygent.backend.Admissions`): a request takes a slot
    of this event loop's lease on its endpoint's bound, then its budget of its model's
    rate lease, both leased from the endpoint's gateway (see the module docstring)."""

    def __init__(self, options: RayOptions) -> None:
        self.options = options

    def lease(self, limits: Limits) -> EndpointLease:
        """This event loop's lease on the endpoint's bound."""
        return self._lease(
            ("bound", limits.endpoint),
            limits.max_concurrency,
            lambda: _bounds(limits, self.options.replicas),
        )

    def rate_lease(self, limits: Limits) -> EndpointLease:
        """This event loop's lease on the model's rate."""
        return self._lease(
            ("rate", limits.rate_key),
            declared_limits(limits)[1:],
            lambda: _rate_bounds(limits, self.options.replicas),
        )

    async def admit(self, request: ModelRequest, limits: Limits) -> LeasedAdmission:
        try:
            return await admitted(request, self.lease(limits), self.rate_lease(limits))
        except GatewayUnavailable as exc:
            model = request.model
            raise ProviderConnectionError(
                f"{model.provider}: {exc}; the request was not sent", provider=model.provider
            ) from None

    def _lease(
        self, key: tuple[str, Hashable], declared: Any, shares_of: Callable[[], list[Bounds]]
    ) -> EndpointLease:
        o = self.options
        o.connect()
        loop = asyncio.get_running_loop()
        per_loop = _leases.get(loop)
        if per_loop is None:
            per_loop = _leases[loop] = {}
        # A model rebuilt with other limits gets a lease (a holder) of its own: the
        # gateway holds the tightest of the live holders' declarations.
        cache_key = (job_id(), o.namespace, key, o.replicas, declared)
        lease = per_loop.get(cache_key)
        if lease is None:
            # What the gateway keys on (the same in every process): the endpoint alone
            # for a bound, ("rate", the model's rate key) for a rate.
            shared = key[1] if key[0] == "bound" else key
            digest, holder = endpoint_digest(shared), f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
            shares = shares_of()  # only for a new lease: a request's path stays short
            channels = [
                _RayChannel(o, name, digest, bounds, holder)
                for name, bounds in zip(gateway_names(len(shares)), shares, strict=True)
            ]
            lease = per_loop[cache_key] = EndpointLease(channels, idle_release=o.lease_idle)
        return lease


class RayModelAccess(AccessLayer):
    """`ModelAccess` on Ray: the core's access layer over `RayAdmissions`. Every request
    is sent from this process, inside a slice of its endpoint's bound leased from the
    endpoint's gateway; a 429 pauses every holder of the endpoint and is sent again by
    `RayOptions.retry` (unless its route fails fast); aborting the run closes its HTTP
    request, as in-process. A tenant's requests take their fair share of this process's
    slots first (`raygent.backend.TenantAdmissions`)."""

    __slots__ = ("options", "ray_admissions")

    def __init__(self, options: RayOptions | None = None) -> None:
        self.options = options or RayOptions()
        self.ray_admissions = RayAdmissions(self.options)
        super().__init__(TenantAdmissions(self.ray_admissions), self.options.retry)

    def __reduce__(self) -> tuple[Any, ...]:
        # Shipped to Ray workers with the agent: rebuilt there, with that process's leases.
        return (RayModelAccess, (self.options,))

    def lease(self, model: Model) -> EndpointLease | None:
        """This event loop's lease on the model's endpoint (None: not bounded)."""
        provider = as_provider_model(model)
        if provider is None:
            return None
        return self.ray_admissions.lease(provider.limits())

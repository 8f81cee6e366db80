"""Model access on Ray: each provider endpoint's requests go through its gateway actor.

A gateway is a named async actor (`raygent-gw-<hash>-<replica>`) in the backend's
namespace, so every driver, runner and worker of the cluster that sends to an endpoint
reaches the same actor, and its bound holds cluster-wide. Handles are looked up (or the
actor created) once per endpoint per process. An endpoint's limits are those declared by
the model that created its gateway.

Models that cannot be shared with another process run in the caller's process, outside
any gateway: models with no `endpoint` (the in-process test doubles `ScriptedModel`,
`FunctionModel`: their state is in this process), and HTTP models given their own
`http_client` (that client, its proxy or certificates, belong to this process).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import AsyncIterator, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import ActorDiedError, RayActorError, RayTaskError

from ._core import (
    AbortSignal,
    AbortWatch,
    Message,
    Model,
    ModelOptions,
    ModelResponse,
    ProviderConnectionError,
    RaygentError,
    StreamChunk,
    _routed,
    abortable,
    closing_stream,
)
from ._gateway_actor import Gateway, GatewayLimits
from ._limits import partition
from ._options import RayOptions
from ._ray import actor_class, awaited, job_id

__all__ = ["RayModelAccess", "gateway_key", "gateway_names"]

# Calls to one gateway wait on the network, not the CPU: let thousands be in flight.
ACTOR_CONCURRENCY = 10_000


def gateway_key(model: Model) -> Hashable | None:
    """What a gateway is shared by: the endpoint (provider, base URL, key fingerprint) and
    the model's optional `gateway_group` (for providers whose limits are per model).
    None for a model that runs in the caller's process."""
    endpoint = getattr(model, "endpoint", None)
    if endpoint is None or getattr(model, "_injected_client", None) is not None:
        return None
    return (endpoint, getattr(model, "gateway_group", None))


def gateway_names(key: Hashable, replicas: int) -> list[str]:
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:12]
    return [f"raygent-gw-{digest}-{i}" for i in range(replicas)]


@dataclass
class _Replicas:
    names: list[str]
    handles: list[Any]
    turn: Iterator[int]

    def pick(self) -> tuple[str, Any]:
        i = next(self.turn) % len(self.handles)
        return self.names[i], self.handles[i]


# Per process: (job, namespace, gateway key, replicas, detached) -> handles.
_replicas: dict[tuple[Hashable, ...], _Replicas] = {}


class RayModelAccess:
    """`ModelAccess` through gateway actors: one actor call per `complete`, one
    streaming call per `stream` (chunks arrive in batches and are unbatched here).
    Aborting the run, or cancelling the awaiting task, cancels the remote call, which
    closes the HTTP request."""

    def __init__(self, options: RayOptions | None = None, *, retries: bool = True) -> None:
        self.options = options or RayOptions()
        self.retries = retries

    def __reduce__(self) -> tuple[Any, ...]:
        # Shipped to Ray workers with the agent: rebuilt there, sharing that process's cache.
        return (_access, (self.options, self.retries))

    def failing_fast(self) -> RayModelAccess:
        """This access with the gateways' 429 retries off: for a model that has another
        to fall back on (`fallback_model`), which is what a 429 should lead to."""
        return RayModelAccess(self.options, retries=False)

    def _gateway(self, model: Model) -> tuple[str, Any] | None:
        key = gateway_key(model)
        if key is None:
            return None
        self.options.connect()
        o = self.options
        cache_key = (job_id(), o.namespace, key, o.replicas, o.detached)
        found = _replicas.get(cache_key)
        if found is None:
            found = _replicas[cache_key] = self._create(key, model)
        return found.pick()

    def _create(self, key: Hashable, model: Model) -> _Replicas:
        o = self.options
        bound: int | None = getattr(model, "max_concurrency", None) or None
        shares: list[int | None] = [None] * o.replicas
        if bound is not None:
            shares = list(partition(bound, o.replicas))  # never more replicas than slots
        count = len(shares)
        rpm = getattr(model, "requests_per_minute", None)
        tpm = getattr(model, "tokens_per_minute", None)
        names = gateway_names(key, count)
        handles = []
        for name, share in zip(names, shares, strict=True):
            limits = GatewayLimits(
                max_concurrency=share,
                requests_per_minute=rpm / count if rpm else None,
                tokens_per_minute=tpm / count if tpm else None,
                retry=o.retry,
                batching=o.batching,
            )
            handles.append(
                actor_class(Gateway)
                .options(
                    name=name,
                    namespace=o.namespace,
                    get_if_exists=True,
                    lifetime="detached" if o.detached else None,
                    max_concurrency=ACTOR_CONCURRENCY,
                    num_cpus=0,
                    max_restarts=-1,
                    max_task_retries=0,
                )
                .remote(limits)
            )
        return _Replicas(names, handles, itertools.count())

    def _forget(self, name: str) -> None:
        for cache_key, found in list(_replicas.items()):
            if name in found.names:
                del _replicas[cache_key]

    def _unavailable(self, name: str, exc: RayActorError, model: Model) -> ProviderConnectionError:
        if isinstance(exc, ActorDiedError):
            self._forget(name)  # the next request creates it anew
        return ProviderConnectionError(
            f"{model.provider}: the model gateway {name} is unavailable "
            f"({type(exc).__name__}); the request may not have been sent",
            provider=model.provider,
        )

    async def complete(
        self,
        model: Model,
        messages: Sequence[Message],
        options: ModelOptions,
        signal: AbortSignal | None,
    ) -> ModelResponse:
        model = _routed(model, self)
        found = self._gateway(model)
        if found is None:
            return await model.complete(messages, options, signal=signal)
        name, handle = found
        try:
            ref = handle.complete.remote(model, messages, options, self.retries)
            result = await abortable(awaited(ref), signal)
        except RayTaskError as exc:
            raise _cause(exc) from None
        except RayActorError as exc:
            raise self._unavailable(name, exc, model) from None
        if isinstance(result, RaygentError):
            raise result
        assert isinstance(result, ModelResponse)
        return result

    async def stream(
        self,
        model: Model,
        messages: Sequence[Message],
        options: ModelOptions,
        signal: AbortSignal | None,
    ) -> AsyncIterator[StreamChunk]:
        model = _routed(model, self)
        found = self._gateway(model)
        if found is None:
            chunks = model.stream(messages, options, signal=signal)
            async with closing_stream(chunks):
                async for chunk in chunks:
                    yield chunk
            return
        name, handle = found
        remote = handle.stream.remote(model, messages, options, self.retries)
        finished = False
        try:
            with AbortWatch(signal) as watch:
                while True:
                    try:
                        ref = await watch.until(anext(remote))
                    except StopAsyncIteration:
                        finished = True
                        return
                    batch = await watch.until(ref)
                    if isinstance(batch, RaygentError):
                        finished = True
                        raise batch
                    for chunk in batch:
                        yield chunk
        except RayTaskError as exc:
            finished = True
            raise _cause(exc) from None
        except RayActorError as exc:
            finished = True
            raise self._unavailable(name, exc, model) from None
        finally:
            if not finished:
                # Aborted, cancelled, or closed early by the consumer: stop the gateway's
                # request (ray.cancel cancels its asyncio task, closing the connection).
                ray.cancel(remote)


def _cause(exc: RayTaskError) -> Exception:
    """The exception the gateway raised (a bug, not a provider error: those come back
    as values)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, Exception) else exc


def _access(options: RayOptions, retries: bool) -> RayModelAccess:
    return RayModelAccess(options, retries=retries)

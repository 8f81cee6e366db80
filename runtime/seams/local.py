"""The seams implemented in this process: `LOCAL`, the backend of `RAYGENT_BACKEND=local`
and of everything a Ray worker runs inside itself."""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from ..errors import RateLimitError
from ..models.contract import Limits, ModelResponse
from ..rates import Need
from ._endpoint_bound import EndpointBound
from .access import AccessLayer, RetryPolicy
from .contract import Backend
from .fair_share import TenantAdmissions
from .rated import HeldRate, LocalRates, wait_held_back
from .request import ModelRequest

if TYPE_CHECKING:
    from ..tools import Tool, ToolContext

__all__ = ["LOCAL", "LocalAdmissions", "LocalModelAccess", "LocalToolExecution"]


class LocalAdmissions:
    """The counters of this process (`Admissions`): each endpoint's `max_concurrency`
    (an `EndpointBound` per event loop: each request under its own model's limit) and
    each model key's rate (`rated.LocalRates`). A request goes while fewer than its
    model's bound are in flight to its endpoint, once its rate lets it."""

    def __init__(self) -> None:
        self._bounds: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[Hashable, EndpointBound]
        ] = weakref.WeakKeyDictionary()
        self._rates = LocalRates()

    def _bound(self, limits: Limits) -> EndpointBound | None:
        if not limits.max_concurrency:
            return None
        loop = asyncio.get_running_loop()
        per_loop = self._bounds.get(loop)
        if per_loop is None:
            per_loop = self._bounds[loop] = {}
        bound = per_loop.get(limits.endpoint)
        if bound is None:
            bound = per_loop[limits.endpoint] = EndpointBound()
        return bound

    async def admit(self, request: ModelRequest, limits: Limits) -> LocalAdmission:
        bound = self._bound(limits)
        limit = limits.max_concurrency or 0
        held = self._rates.held(limits)
        # A 429 that paused the key less than it said: this request waits it out.
        waited = await wait_held_back(held.held_back, request, request.signal)
        if held.pacer.idle:  # nothing to hold: the learner's meter, and the bound
            held.went()
            if bound is not None:
                await bound.acquire(limit)
            return LocalAdmission(held, bound, request, waited=waited)
        # Paced: its turn (a probe first), a slot (at most the learnt concurrency), then
        # its rate, so that what it takes of the rate is sent at once.
        probe = await held.probe_turn(request.signal)
        try:
            if bound is not None:
                await bound.acquire(held.pacer.concurrency(limit))
            try:
                need = held.need(request.model, request.messages, request.options)
                waited += await held.wait(need, request.signal)
            except BaseException:
                if bound is not None:
                    bound.release()
                raise
        except BaseException:
            if probe:
                held.probed()
            raise
        return LocalAdmission(held, bound, request, need, waited, probe)


class LocalAdmission:
    """One request let through in this process (see `seams.access.Admission`)."""

    __slots__ = (
        "_bound",
        "_held",
        "_need",
        "_probe",
        "_sent",
        "_settled",
        "model",
        "rate_wait",
        "request",
    )

    def __init__(
        self,
        held: HeldRate,
        bound: EndpointBound | None,
        request: ModelRequest | None = None,
        need: Need | None = None,
        waited: float = 0.0,
        probe: bool = False,
    ) -> None:
        self._held, self._bound = held, bound
        self.request = request
        self.model = None if request is None else request.model
        self._need = need  # None: not paced
        self.rate_wait = waited
        self._probe = probe
        self._sent = time.monotonic() if need is not None else 0.0
        self._settled = False

    def answered(self, response: ModelResponse) -> None:
        need = self._need
        if need is None:
            if response.rate is not None:
                self._held.learn(response)
            return
        self._settled = True
        assert self.model is not None
        self._held.answered(self.model, response, need, self._sent)

    def throttled(self, error: RateLimitError, pause: float | None) -> None:
        held = self._held
        if self._need is None:
            in_flight = self._bound.in_flight if self._bound is not None else 1
            held.throttled(error, in_flight, self.request)
            return
        self.failed()
        held.throttled(error, held.pacer.in_flight + 1, self.request)

    def failed(self) -> None:
        if self._need is not None and not self._settled:
            self._settled = True
            self._held.settle(self._need, None, time.monotonic())

    def done(self) -> None:
        need = self._need
        if need is not None and not self._settled:  # cut off: counted whole
            self._settled = True
            self._held.settle(need, need, time.monotonic())
        if self._bound is not None:
            self._bound.release()
        if self._probe:
            self._probe = False
            self._held.probed()


class LocalModelAccess(AccessLayer):
    """The access layer (`seams.access`) over this process's counters
    (`LocalAdmissions`, tenants' fair shares in front). Models that declare no limits
    (test doubles) are not bounded."""

    __slots__ = ()

    def __init__(self, policy: RetryPolicy | None = None) -> None:
        super().__init__(TenantAdmissions(LocalAdmissions()), policy)

    def __reduce__(self) -> tuple[Any, ...]:
        # Bounds are per process (and per event loop): a copy elsewhere starts afresh.
        return (type(self), (self.policy,))


class LocalToolExecution:
    """Runs tools in this process (sync tools in a worker thread)."""

    async def invoke(
        self, tool: Tool[..., Any], arguments: dict[str, Any] | None, ctx: ToolContext
    ) -> Any:
        return await tool.invoke(arguments, ctx)


class _LocalBackend(Backend):
    def __reduce__(self) -> str:
        # LOCAL travels by name: an agent built on it and shipped to a Ray worker runs
        # on that process's own in-process backend.
        return "LOCAL"


LOCAL: Backend = _LocalBackend("local", LocalModelAccess(), LocalToolExecution())

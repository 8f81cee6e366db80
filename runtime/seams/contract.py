"""The seams between the core and where work runs: the protocols a backend implements.

The loop never talks to Ray. It asks a `Backend` for model access, tool execution,
session persistence and batch execution. `raygent.seams.local` implements them in this
process (`LOCAL`); the Ray backend (raygent.actors) implements the same protocols with
model gateways, tool executors, session hosts and batch runners, and the same scenario
tests run on both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..abort import AbortSignal
from ..budgets import Budget, BudgetLedger, LocalBudgets
from ..memory import LocalSessions, SessionPersistence
from ..models.contract import Model
from .attempt import AttemptPlan
from .batch import Deliver, Feed
from .provider_lines import LineAnswer, LineCost, LineOptions
from .request import ModelAccess
from .retry import Retry
from .tenants import LocalTenants, Tenants

if TYPE_CHECKING:
    from ..tools import Tool, ToolContext

T = TypeVar("T")

__all__ = [
    "Backend",
    "BackendPlugin",
    "BatchExecution",
    "BatchPool",
    "Budgets",
    "ModelAccess",
    "PoolPlan",
    "ProviderBatchPool",
    "ToolExecution",
]


class ToolExecution(Protocol):
    """Runs one tool call (the loop runs the calls of a trip concurrently)."""

    async def invoke(
        self, tool: Tool[..., Any], arguments: dict[str, Any] | None, ctx: ToolContext
    ) -> Any: ...


class BatchPool(Protocol):
    """Keeps a batch's attempts in flight and hands each item over as it ends:
    `_batch.engine.InFlight` in this process, or a Ray backend's runner actors."""

    feed_error: BaseException | None
    deliver_error: BaseException | None
    failure: str | None  # why the pool stopped on its own, when it did

    @property
    def signal(self) -> AbortSignal: ...

    @property
    def retries(self) -> int: ...

    @property
    def retrying(self) -> int: ...

    def abort(self, reason: str | None = None) -> None: ...

    async def run(self, feed: Feed) -> None: ...


class BatchExecution(Protocol):
    """Where a batch's attempts run (the backend's `batches`; None runs them here)."""

    def check(self, executable: Any) -> None:
        """Raise TypeError, before anything runs, if `executable` cannot run there."""

    def pool(self, executable: Any, plan: PoolPlan) -> BatchPool: ...

    async def start(self, concurrency: int, runners: int | None = None) -> None:
        """Start now what a batch of this `concurrency` will run on (runner actors), so
        that the next batch begins at once."""


class ProviderBatchPool(Protocol):
    """A job's pool of provider-batch lines as a backend reaches it: the members the Ray
    backend's relay uses (`raygent._batch.provider.pool.LinePool` implements them)."""

    keep_answers: bool  # keep answers until their item ends (a run asks again)

    @property
    def options(self) -> LineOptions:
        """The job's `raygent.ProviderBatch` (shipped to the runners)."""
        ...

    @property
    def job(self) -> str:
        """The job's name, in every line's custom_id."""
        ...

    @property
    def runner_route(self) -> Any:
        """A job with a deadline: its route as the runners follow it (a small frozen
        value, shipped with the options); None: no route."""
        ...

    def route(self, model: Model) -> object | None:
        """Where `model`'s lines go, an opaque handle for `line_future` (None: it has no
        provider-batch API)."""
        ...

    def line_future(
        self, model: Model, route: object | None, custom_id: str, line: bytes
    ) -> asyncio.Future[LineAnswer]:
        """The answer to one line, for a caller by callback."""
        ...

    def add_spend(self, spend: LineCost) -> None:
        """What a runner's lines cost, added to the job's summary."""
        ...


@dataclass(frozen=True)
class PoolPlan:
    """What a batch pool is asked to do (the options of `raygent.batch` that concern
    running, not reading or recording)."""

    run_options: Mapping[str, Any] | None  # what each run is given (an agent's RunOptions)
    concurrency: int
    retry: Retry
    deliver: Deliver
    signal: AbortSignal | None
    grace: float
    runners: int | None
    # provider_batch=: the job's pool of provider-batch lines (in the driver), whose lines
    # the runners' runs send through the driver; and the job's deadline (time.time()),
    # past which a trip goes online.
    lines: ProviderBatchPool | None = None
    deadline: float | None = None
    # provider_batch=: `concurrency` is then the items held (running or waiting for
    # their lines), and `active` the attempts working at once (see `_batch.active`).
    active: int | None = None
    # An item failed on an error every item would meet (an authentication error, a
    # missing model) stops the pool at once (`_batch.stops`); `check=False` says not.
    stop_on_config: bool = True
    # What each attempt gets besides `run_options` (the job's ledger, how its items'
    # runs are named): typed, and shipped to where the attempts run.
    attempts: AttemptPlan = field(default_factory=AttemptPlan)


class Budgets(Protocol):
    """Where a job's budget is held (`budgets.LocalBudgets`: in this process; Ray: by its
    gateway, every process leasing slices of it)."""

    def job(self, budget: Budget, key: str) -> BudgetLedger:
        """The ledger of the job `key` (picklable: each process that unpickles it holds
        the same budget)."""


class BackendPlugin(Protocol):
    """What a backend package registers under the entry-point group `raygent.backends`
    (raygent.actors registers `ray`); the core reaches a backend only through this."""

    def default(self) -> Backend:
        """The backend used until `raygent.init`: it starts or joins on first use."""

    def connect(
        self,
        *,
        address: str | None,
        namespace: str,
        options: Any,
        init_kwargs: Mapping[str, Any],
    ) -> Backend:
        """Start or join now (`raygent.init(name, ...)`)."""

    def map_dataset(self, dataset: Any, executable: Any, **options: Any) -> Any:
        """`raygent.data.map`'s stage over `dataset` (see its docstring for options)."""

    def ship_by_value(self, module: ModuleType) -> None:
        """Send what `module` defines to the workers by value, not by reference."""


@dataclass(frozen=True)
class Backend:
    name: str
    models: ModelAccess
    tools: ToolExecution
    sessions: SessionPersistence = field(default_factory=LocalSessions)
    batches: BatchExecution | None = None
    budgets: Budgets = field(default_factory=LocalBudgets)
    tenants: Tenants = field(default_factory=LocalTenants)

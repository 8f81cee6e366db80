"""Batch on Ray: runner actors keep the attempts in flight; the driver feeds and records.

The driver reads the items (so generators, files and datasets stream as on the local
backend), sends them to the runners in chunks, and receives each item once it has ended,
in batches, over one streaming call per runner. `concurrency` is split among the runners
(never multiplied), so it bounds the attempts in flight across the cluster; provider
bounds are held by the gateways the runs in the runners go through.

Each runner serves a *lane* of the batch. An item that names a session goes to the lane
of that session (a stable hash of it), in input order, so one runner runs all of a
session's items, one after another, and writes them to the store itself (no session
host on the way); other items go wherever there is room. At the end the driver tells
the session hosts to forget the conversations the batch wrote around them.

Runners belong to the driver (they end with it) and are kept for its next batches: a
batch takes the ones it needs and makes those missing. The driver knows which items
each runner holds. A runner that dies (killed, its node lost) gives its unfinished
items back: they run again on the runner that replaces it in its lane (so its sessions
move with them, still in order), their lost attempt counted. An item is recorded when
its result reaches the driver, and only then, so none is recorded twice. An item that
has taken down `MAX_LOST` runners fails (typed) instead of taking down more; if runners
cannot be started at all, the batch stops with that error, reading no more items.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ray
import ray.cloudpickle
from ray.exceptions import RayError, RayTaskError

from raygent.backend import (
    AbortController,
    AbortSignal,
    AgentReport,
    Backend,
    BatchItem,
    Feed,
    FlowReport,
    Job,
    Outcome,
    RaygentError,
    cancelled,
    current_backend,
    ended,
    redacting_logger,
    registered,
    scope_of,
    session_of,
    uses_global,
)
from raygent.backend import deliver as observe

from .._options import RayOptions
from .._ray import actor_class, job_id
from ..sessions.persistence import store_identity
from .backlog import Backlogs
from .line_relay import LineRelay
from .runner import BatchRunner, UnsentResultError
from .sizing import runner_count, split_slots

if TYPE_CHECKING:
    from raygent.backend import BatchPool, PoolPlan

__all__ = ["RayBatchRunners", "RunnerLostError", "RunnerPool"]

logger = redacting_logger(__name__)
_dumps: Callable[[Any], bytes] = ray.cloudpickle.dumps
_loads: Callable[[bytes], Any] = ray.cloudpickle.loads

MAX_LOST = 3  # runners an item may take down before it fails

# Builds the backend each runner runs with, from the options (`raygent.actors.ray_backend`).
RunnerBackend = Callable[[RayOptions], Backend]

# A runner is topped up once an eighth of its slots are free, and holds a quarter more
# jobs than slots: a queued job starts as a slot frees, not a trip to the driver later
# (issue 38: 0.71 -> 0.91-0.94 of a hand loop); unstarted, it costs a resume nothing.
REFILL_SHARE = 8
AHEAD_SHARE = 4


class RunnerLostError(RaygentError):
    """A batch runner died holding this item. With `fatal=True` (a detail, like every
    error's: it pickles and reads as `error.fatal`), no runner could be kept up."""

    code = "RUNNER_LOST"
    category = "batch"


class RayBatchRunners:
    """`BatchExecution` on Ray: each batch gets its own runner actors.

    `runner_backend` builds the backend the runners run with (`ray_backend`, which
    builds these runners too: it is handed in, not imported)."""

    def __init__(self, options: RayOptions | None, runner_backend: RunnerBackend) -> None:
        self.options = options or RayOptions()
        self.runner_backend = runner_backend

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.options, self.runner_backend))

    def check(self, executable: Any) -> None:
        memory = getattr(executable, "memory", None)
        store = getattr(memory, "store", None)
        if store is not None and store_identity(store) is None:
            # Each runner would get its own copy: sessions split, and lost with it.
            raise TypeError(
                f"the agent's memory ({type(store).__name__}) lives in this process, so "
                "batch runners cannot share its sessions: use an SQLite file or Redis, "
                "or run the batch in this process with runners=0"
            )
        try:
            _dumps(executable)
        except Exception as exc:
            raise TypeError(
                f"the batch's executable cannot be shipped to Ray runners: {type(exc).__name__}: "
                f"{exc}. Keep what it holds picklable (make clients inside it, per process), "
                "or run the batch in this process with runners=0."
            ) from exc

    def pool(self, executable: Any, plan: PoolPlan) -> BatchPool:
        return RunnerPool(executable, plan, self.options, self.runner_backend)

    async def start(self, concurrency: int, runners: int | None = None) -> None:
        """Start (or find) the runners a batch of this `concurrency` will use, and wait
        until they are up: this driver's next batch then begins at once (a runner is a
        worker process that takes a second or so to start)."""
        self.options.connect()
        taken: list[Any] = []
        for _ in range(runner_count(concurrency, runners)):
            taken.append(_fleet.take(self.options, self.runner_backend, taken)[0])
        await asyncio.gather(*(handle.__ray_ready__.remote() for handle in taken))


@dataclass(eq=False)
class _Runner:
    """A runner's share of this batch (each share has its own id on a runner)."""

    handle: Any
    slots: int
    share: str
    lane: int
    held: dict[int, Job] = field(default_factory=dict)  # sent, not yet back
    closed: bool = False
    chunks: int = 0  # submit calls made (the chunks sent)
    answers: int = 0  # result batches received
    received: int = 0  # bytes of the results received
    ended: bool = False
    retries: int = 0
    retrying: int = 0
    delivered: int = 0
    opened: bool = False
    fresh: bool = True  # made for this batch (not kept from an earlier one)


class RunnerPool:
    """A `BatchPool` over runner actors (see the module docstring)."""

    def __init__(
        self, executable: Any, plan: PoolPlan, options: RayOptions, runner_backend: RunnerBackend
    ) -> None:
        self._executable, self._plan, self._options = executable, plan, options
        self._runner_backend = runner_backend
        self._controller = AbortController()
        self._runners: list[_Runner] = []  # every runner of the batch, dead ones too
        self._lanes: list[_Runner] = []  # the runner serving each lane now
        self._backlog = Backlogs()
        self._touched: set[tuple[Any, Any]] = set()  # sessions the batch ran in
        self._consumers: set[asyncio.Task[None]] = set()
        self._lost: dict[int, int] = {}
        self._changed = asyncio.Event()
        self._exhausted = self._stopping = False
        self._barren = 0  # runners that died before giving anything back
        self._payload: Any = None
        self._id = uuid.uuid4().hex
        self._relay = LineRelay(plan.lines)
        self._ahead = 1 / AHEAD_SHARE if plan.lines is None else 0.0  # (max_waiting bounds)
        # provider_batch=: each lane's share of the attempts working at once (`slots`
        # is then its share of the items in flight, most of them waiting for lines).
        self._active: list[int] = []
        # The driver's global observers see the runners' runs by the usual rule.
        self._observed = uses_global(
            getattr(executable, "observe", None), (plan.run_options or {}).get("observe")
        )
        self.feed_error: BaseException | None = None
        self.deliver_error: BaseException | None = None
        self.failure: str | None = None

    @property
    def signal(self) -> AbortSignal:
        return self._controller.signal

    @property
    def retries(self) -> int:
        return sum(r.retries for r in self._runners)

    @property
    def retrying(self) -> int:
        return self._backlog.requeued + sum(r.retrying for r in self._lanes if not r.ended)

    def abort(self, reason: str | None = None) -> None:
        self._controller.abort(reason)

    async def run(self, feed: Feed) -> None:
        loop = asyncio.get_running_loop()

        def wake() -> None:  # abort() may come from any thread
            loop.call_soon_threadsafe(self._changed.set)

        unhook = self.signal.add_callback(wake)
        outer = self._plan.signal
        unlink = outer.add_callback(lambda: self.abort(outer.reason)) if outer else None
        try:
            self._options.connect()
            self._payload = ray.put(_dumps(self._executable))
            plan = self._plan
            count = runner_count(plan.concurrency, plan.runners)
            if plan.active is not None:  # provider_batch=: each runner works on some
                count = min(count, plan.active)
                self._active = split_slots(plan.active, count)
            for lane, slots in enumerate(split_slots(plan.concurrency, count)):
                self._backlog.add_lane()
                self._spawn(lane, slots)
            await self._drive(feed)
            await self._forget_touched()
        except asyncio.CancelledError:
            self.abort(self.signal.reason or "the batch task was cancelled")
            await self._abandon()
            raise
        finally:
            unhook()
            if unlink is not None:
                unlink()
            self._shutdown()

    def _spawn(self, lane: int, slots: int) -> None:
        busy = [r.handle for r in self._lanes if not r.ended]
        handle, fresh = _fleet.take(self._options, self._runner_backend, busy)
        share = f"{self._id}-{len(self._runners)}"
        runner = _Runner(handle, slots, share, lane, fresh=fresh)
        self._runners.append(runner)
        if lane < len(self._lanes):
            self._lanes[lane] = runner
        else:
            self._lanes.append(runner)
        task = asyncio.ensure_future(self._consume(runner))
        self._consumers.add(task)
        task.add_done_callback(self._consumers.discard)

    async def _drive(self, feed: Feed) -> None:
        while True:
            if self.signal.aborted and not self._stopping:
                await self._stop()
            if not self._stopping:
                await self._fill(feed)
            done = self._exhausted or self._stopping
            for lane, runner in enumerate(self._lanes):
                if runner.ended:
                    if self._backlog.lanes[lane] and not self._stopping:
                        self._spawn(lane, runner.slots)  # work left and no runner for it
                elif done and runner.opened and not runner.closed and not self._backlog.lanes[lane]:
                    runner.closed = True
                    runner.handle.close.remote(runner.share, runner.chunks)
            if all(r.ended for r in self._lanes) and not self._backlog.held:
                return
            await self._changed.wait()
            self._changed.clear()

    async def _fill(self, feed: Feed) -> None:
        for runner in self._lanes:
            if runner.ended or runner.closed or not runner.opened:
                continue
            # A runner holds its slots and a quarter (the jobs it runs or has queued, the
            # results on their way back): a killed driver loses at most 1.25x its runs.
            room = runner.slots + int(runner.slots * self._ahead) - len(runner.held)
            if room < max(1, runner.slots // REFILL_SHARE):
                continue
            chunk = [job async for job in self._take(feed, runner.lane, room)]
            if chunk:
                runner.held.update((job.index, job) for job in chunk)
                runner.handle.submit.remote(runner.share, runner.chunks, chunk)
                runner.chunks += 1

    async def _take(self, feed: Feed, lane: int, count: int) -> AsyncIterator[Job]:
        """Up to `count` jobs for `lane`: its backlog first (requeued, then routed to
        it), then the feed; a job read for another lane's session joins that lane's
        backlog (at most twice the concurrency are held aside so)."""
        taken = 0
        while taken < count:
            waiting = self._backlog.pop(lane)
            if waiting is not None:
                job = waiting
            elif self._exhausted or self._backlog.held >= 2 * self._plan.concurrency:
                return
            else:
                read = await self._read(feed)
                if read is None:
                    return
                if read.error is not None:  # unreadable: it fails here, unrun
                    await self._deliver(ended(read, Outcome("failed", error=read.error)))
                    continue
                target = self._lane_of(read)
                if target is not None and target != lane:
                    self._backlog.route(target, read)
                    continue
                job = read
            taken += 1
            yield job

    def _lane_of(self, job: Job) -> int | None:
        """The lane of the job's session (a stable hash: the same in any process), or
        None for a job that names none."""
        session = session_of(job)
        if session is None:
            return None
        digest = hashlib.sha256(repr(session).encode()).digest()
        return int.from_bytes(digest[:8], "big") % len(self._lanes)

    async def _read(self, feed: Feed) -> Job | None:
        try:
            if isinstance(feed, Iterator):
                return next(feed)
            return await anext(feed)
        except (StopIteration, StopAsyncIteration):
            self._exhausted = True
        except Exception as exc:
            self._exhausted = True  # a failing feed ends there; what it gave still runs
            self.feed_error = exc
        return None

    async def _consume(self, runner: _Runner) -> None:
        died: BaseException | None = None
        try:
            plan, lines = self._plan, self._plan.lines
            active = self._active[runner.lane] if self._active else None
            ship = lines and (lines.options, lines.job, plan.deadline, active, lines.runner_route)
            opening = runner.handle.open.remote(
                runner.share,
                self._payload,
                plan.run_options,
                runner.slots,
                plan.retry,
                plan.grace,
                ship,
                plan.stop_on_config,
                plan.attempts,
            )
            try:
                await opening
            except RayTaskError as exc:
                # The runner is fine; the executable fails to load there (a module the
                # workers cannot import, say): every runner would fail alike.
                cause = getattr(exc, "cause", None) or exc
                self.failure = (
                    f"batch runners cannot load the executable: {type(cause).__name__}: {cause}"
                )
                self.abort(self.failure)
                return
            runner.opened = True
            self._changed.set()
            stream = runner.handle.results.options(num_returns="streaming").remote(runner.share)
            async for ref in stream:
                pickled, runner.retries, runner.retrying, relayed = await ref
                if relayed is not None:
                    self._relay.take(runner.handle, runner.share, relayed)
                runner.answers += 1
                runner.received += sum(len(data) for _, data in pickled)
                await self._receive(runner, pickled)
        except RayError as exc:
            died = exc
            _fleet.discard(self._options, runner.handle)
        except Exception as exc:
            # Results this process cannot read (a type it cannot import, say): what the
            # runner held runs again elsewhere, up to MAX_LOST times, then fails typed.
            logger.warning("batch runner results unreadable: %r", exc)
            died = exc
            runner.handle.abort.remote(runner.share, "the driver cannot read its results")
            if not runner.closed:  # nothing more comes: the runner may forget the batch
                runner.closed = True
                runner.handle.close.remote(runner.share, runner.chunks)
        finally:
            runner.ended, runner.retrying = True, 0
            await self._settle_held(runner, died)
            self._changed.set()

    async def _receive(self, runner: _Runner, pickled: list[tuple[int, bytes]]) -> None:
        for index, data in pickled:
            job = runner.held.pop(index, None)
            if job is None:
                continue
            runner.delivered += 1
            session = session_of(job)
            if session is not None:
                self._touched.add(session)
            try:
                item: BatchItem = _loads(data)
            except Exception as exc:
                error = UnsentResultError(
                    f"item {index}: the driver cannot read its result: {type(exc).__name__}: {exc}"
                )
                job.attempts += 1  # at least the one that made the result
                item = ended(job, Outcome("failed", error=error))
            await self._observe(item)
            await self._deliver(item)
        self._changed.set()

    async def _observe(self, item: BatchItem) -> None:
        """Observers registered in the driver see the runs its runners made (in the
        runner's process, the registry is its own: empty unless filled there): an
        agent's, a workflow's or a supervisor's report tree, once per item."""
        report = getattr(item.result, "report", None)
        if not isinstance(report, (AgentReport, FlowReport)) or not self._observed:
            return
        observers = registered()
        if observers:
            await observe(report, observers)

    async def _settle_held(self, runner: _Runner, died: BaseException | None) -> None:
        """What a runner held and never gave back: cancelled if the batch is stopping,
        else run again elsewhere (or failed, for an item that took down too many)."""
        held, runner.held = list(runner.held.values()), {}
        if died is not None:
            logger.warning("batch runner lost with %d items: %s", len(held), died)
        if self._stopping or self.signal.aborted:
            for job in held:
                await self._deliver(ended(job, Outcome("cancelled", error=cancelled(self.signal))))
            return
        if died is not None and not runner.delivered and runner.fresh:
            self._barren += 1  # a kept runner found dead says nothing of this batch
        if self._barren >= MAX_LOST:
            # Runners die before giving anything back (an executable that cannot be
            # unpickled there, no room to place them): stop, rather than fail every item.
            error = RunnerLostError(f"batch runners cannot be kept up: {died}", fatal=True)
            for job in held:
                await self._deliver(ended(job, Outcome("failed", error=error)))
            self.failure = str(error)
            self.abort(self.failure)
            return
        requeued = []
        for job in held:
            lost = self._lost[job.index] = self._lost.get(job.index, 0) + 1
            job.attempts += 1
            job.lost += 1
            if lost >= MAX_LOST:
                error = RunnerLostError(f"item {job.index}: {lost} runners died running it")
                await self._deliver(ended(job, Outcome("failed", error=error)))
            else:
                requeued.append(job)
        self._backlog.requeue(runner.lane, requeued)
        if self._backlog.lanes[runner.lane] or not self._exhausted:
            self._spawn(runner.lane, runner.slots)

    async def _stop(self) -> None:
        self._stopping = True
        reason = self.signal.reason
        for runner in self._lanes:
            if not runner.ended:
                runner.handle.abort.remote(runner.share, reason)
        for job in self._backlog.drain():
            await self._deliver(ended(job, Outcome("cancelled", error=cancelled(self.signal))))

    async def _abandon(self) -> None:
        """The batch task was cancelled: what is unfinished ends cancelled now."""
        await self._stop()
        for task in list(self._consumers):
            task.cancel()
        for runner in self._runners:
            held, runner.held = list(runner.held.values()), {}
            for job in held:
                await self._deliver(ended(job, Outcome("cancelled", error=cancelled(self.signal))))

    def _shutdown(self) -> None:
        self._stopping = True  # a consumer still ending gives back what it held cancelled
        self._relay.close()
        for task in list(self._consumers):
            task.cancel()
        # Runners stay up for the driver's next batch; one still running this batch's work
        # (an unexpected exit) is told to stop, and its `close` (it keeps a batch till then).
        for runner in (r for r in self._runners if not r.ended):
            with contextlib.suppress(Exception):
                runner.handle.abort.remote(runner.share, "the batch ended")
                if runner.opened and not runner.closed:
                    runner.handle.close.remote(runner.share, runner.chunks)

    async def _deliver(self, item: BatchItem) -> None:
        try:
            await self._plan.deliver(item)
        except Exception as exc:
            self.deliver_error = self.deliver_error or exc

    async def _forget_touched(self) -> None:
        """The runners wrote the batch's sessions around the session hosts: tell the
        hosts to drop their copies (one call per host; none if no host ever ran)."""
        memory = getattr(self._executable, "memory", None)
        if memory is None or not self._touched:
            return
        backend = getattr(self._executable, "backend", None) or current_backend()
        forget_all = getattr(backend.sessions, "forget_all", None)
        if forget_all is None:
            return
        metadata = (self._plan.run_options or {}).get("metadata")
        scopes = [scope_of(sid, uid, metadata) for sid, uid in self._touched]
        try:
            await forget_all(memory, scopes)
        except Exception as exc:  # the batch is done; a stale copy reloads on conflict
            logger.warning("could not tell the session hosts what the batch wrote: %r", exc)


class _Fleet:
    """This driver's runners (per Ray job and namespace), kept for its next batches:
    made on demand, dropped when found dead. Owned by the driver, they end with it."""

    def __init__(self) -> None:
        self._runners: dict[tuple[str, str], list[Any]] = {}  # by _fleet_key
        self._ids = itertools.count()

    def take(
        self, options: RayOptions, runner_backend: RunnerBackend, busy: list[Any]
    ) -> tuple[Any, bool]:
        """A runner not in `busy` (the batch's own), made if there is none (then the
        flag is True)."""
        key = _fleet_key(options)
        runners = self._runners.setdefault(key, [])
        for handle in runners:
            if not any(handle is other for other in busy):
                return handle, False
        handle = (
            actor_class(BatchRunner)
            .options(
                name=f"raygent-runner-{key[0]}-{next(self._ids)}",  # findable in `ray list actors`
                namespace=options.namespace,
                num_cpus=options.runner_num_cpus,
                scheduling_strategy="SPREAD",
                max_concurrency=1000,
                max_restarts=0,
            )
            .remote(runner_backend(options))
        )
        runners.append(handle)
        return handle, True

    def discard(self, options: RayOptions, handle: Any) -> None:
        runners = self._runners.get(_fleet_key(options), [])
        runners[:] = [h for h in runners if h is not handle]


def _fleet_key(options: RayOptions) -> tuple[str, str]:
    return (job_id(), repr(options))  # one fleet per options (the backend they run with)


_fleet = _Fleet()

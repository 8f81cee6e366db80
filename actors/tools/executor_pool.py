"""Tool calls on tool executors: a per-node pool of long-lived actors that runs every tool
asking for no placement, many calls at once, for every process on the node.

The executors of a node are named async actors, `raygent-tools-<node>-<env>-<i>` in the
backend's namespace (`env`: a digest of the caller's runtime env, which the executor
inherits and the tools' imports may need), pinned to that node, asking for no CPU.
They are detached and end themselves after `tool_executor_idle` seconds without a call,
so every process of the node (drivers, batch runners) shares the same few whichever
created them, and a process that exits never fails another's calls. Handles are looked
up (or the actor created) once per name per process and job.

One remote call per trip and executor touched: the calls of one trip that reach `invoke`
in one event-loop turn (the agent loop starts every call of a round in the same turn)
are gathered per executor and sent together when the turn ends; a call arriving in a
later turn makes another remote call. Calls of different runs never share a remote
call: it is answered when its last call ends, so a fast call would wait for a slow one.
Each call goes to the executor with the fewest calls in flight from this process, so
one stalled by a busy sync tool gets fewer new ones. A tool's pickled bytes go to an
executor once; arguments and contexts go with each call; outcomes come back pickled per
call, matched by the call's key.

Cancelling one waiting `invoke` (its run aborted or cancelled, its backstop passed)
cancels its call on the executor (`cancel`, sent at the end of the turn); once every
waiter of a remote call is cancelled, the remote call itself is cancelled (`ray.cancel`).

When an executor cannot answer:
- it retires (a tool of it is stuck) and answers `Retiring`: nothing ran, the calls go
  to another executor of the node (a retiring one is passed over for a moment);
- it exited on purpose (idle, retired): nothing ran, the calls are sent again, to an
  executor created anew under the same name;
- it died (a tool ended its process, its node was lost): each call becomes a typed
  `ToolExecutionError`, except an idempotent tool's with `retries` left, which is sent
  again; the dead handle is dropped and the executor created anew on the next call;
- it does not answer a call with a `timeout` (an async tool blocks its loop): the caller
  gives up at timeout + `tool_cancel_grace` + `BACKSTOP_SLACK`, with the timeout error.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import time
import uuid
import weakref
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import ActorDiedError, RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raygent.backend import Tool, ToolContext, ToolExecutionError

from .._options import RayOptions
from .._ray import job_id, named_actor, spawn
from .executor import Retiring, ToolCallSpec, ToolExecutor, UnknownTools
from .outcomes import decode, dumps, timed_out, worker_failed

__all__ = ["ToolExecutors", "executor_names"]

# Seconds past timeout + grace before a caller gives up on its executor: it covers the
# executor's start (a worker process: seconds on a busy machine) and the hops.
BACKSTOP_SLACK = 30.0
PASS_OVER = 1.0  # seconds a retiring executor is passed over before it is tried again
PATIENCE = 60.0  # seconds a call may be refused (executors retiring or exiting) before failing
SHIPPING_ATTEMPTS = 3  # sends of a batch whose executor keeps saying it lacks a tool


def executor_names(node_id: str, env: str, count: int) -> list[str]:
    return [f"raygent-tools-{node_id[:12]}-{env}-{i}" for i in range(count)]


class _Resend:
    """What a call gets when its executor ran nothing of it: send it again."""


RESEND = _Resend()
Delivery = bytes | _Resend | BaseException  # an outcome, a resend, or why there is none


@dataclass(eq=False)
class _Call:
    spec: ToolCallSpec
    shipped: tuple[str, bytes]  # the tool's key and pickled bytes
    future: asyncio.Future[Delivery]
    batch: _Batch | None = None


@dataclass(eq=False)
class _Slot:
    """One executor of the pool, as this process (and event loop) sees it."""

    name: str
    known: tuple[str, str, str]  # (job, namespace, name): its handle's and tools' key
    in_flight: int = 0  # calls sent from here and not answered yet
    passed_over_until: float = 0.0  # retiring: try another until then
    # The batches gathering this turn's calls, one per trip (run id, trip index).
    pending: dict[tuple[str, int], _Batch] = field(default_factory=dict)


@dataclass(eq=False)
class _Batch:
    slot: _Slot
    trip: tuple[str, int]
    handle: Any
    calls: list[_Call] = field(default_factory=list)
    tools: dict[str, bytes] = field(default_factory=dict)  # the tools its calls use
    ref: Any = None  # the remote call, once sent
    abandoned: int = 0  # calls whose waiter is gone
    cancels: list[str] | None = None  # keys to cancel at the end of this turn
    answered: bool = False


@dataclass(eq=False)
class _Pool:
    slots: list[_Slot]

    def pick(self) -> _Slot:
        """The executor with the fewest calls in flight from here (the first on ties),
        passing over retiring ones while another is available."""
        now = time.monotonic()
        ready = [slot for slot in self.slots if slot.passed_over_until <= now] or self.slots
        return min(ready, key=lambda slot: slot.in_flight)

    def wait(self) -> float:
        """Seconds until an executor is no longer passed over (0: one is ready)."""
        return max(0.0, min(slot.passed_over_until for slot in self.slots) - time.monotonic())


# Per process: handles, tools known to executors, pickled tools, this job's place, and
# per event loop the pools (calls in flight, batches being gathered).
_handles: dict[tuple[str, str, str], Any] = {}  # (job, namespace, name) -> handle
_shipped: set[tuple[str, str, str, str]] = set()  # (job, namespace, name, tool key)
_pickled: weakref.WeakKeyDictionary[Tool[..., Any], tuple[str, bytes]] = weakref.WeakKeyDictionary()
_places: dict[str, tuple[str, str]] = {}  # job -> (node id, runtime env digest)
_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[Any, ...], _Pool]] = (
    weakref.WeakKeyDictionary()
)
_prefix = uuid.uuid4().hex[:10]  # this process's call keys: unique across the cluster
_serial = itertools.count()


class ToolExecutors:
    """Sends tool calls to this node's tool executors (see the module docstring)."""

    def __init__(self, options: RayOptions) -> None:
        self.options = options

    async def invoke(
        self,
        tool: Tool[..., Any],
        kwargs: dict[str, Any],
        remote_ctx: ToolContext | None,
        ctx: ToolContext,
    ) -> Any:
        shipped = _pickled_tool(tool)
        loop = asyncio.get_running_loop()
        pool = self._pool(loop)
        grace = self.options.tool_cancel_grace
        deadline = None if tool.timeout is None else loop.time() + tool.timeout
        backstop = None if deadline is None else deadline + grace + BACKSTOP_SLACK
        patience = loop.time() + PATIENCE
        failures = 0
        timeout = tool.timeout
        while True:
            key = f"{_prefix}-{next(_serial)}"
            spec = ToolCallSpec(key, shipped[0], kwargs, remote_ctx, timeout, grace)
            call = _Call(spec, shipped, loop.create_future())
            self._join(pool.pick(), (ctx.run_id, ctx.trip_index), call)
            delivered = await _delivery(call, backstop, tool)
            if isinstance(delivered, bytes):
                return decode(delivered, tool, ctx)
            if isinstance(delivered, _Resend):
                if loop.time() > patience:
                    raise ToolExecutionError(
                        f"tool {tool.name!r} could not be run: the tool executors of this "
                        f"node kept refusing it (retiring or exiting) for {PATIENCE:g}s",
                        tool=tool.name,
                        call_id=ctx.call_id,
                    )
                await asyncio.sleep(pool.wait())
            elif isinstance(delivered, RayError):
                if not tool.idempotent or failures >= tool.retries:
                    raise worker_failed(tool, ctx, delivered) from None
                failures += 1  # its executor died mid-call: safe to run it again
            else:
                raise delivered
            if deadline is not None:  # a call sent again has what is left of its timeout
                timeout = deadline - loop.time()
                if timeout <= 0:
                    raise timed_out(tool)

    async def stats(self) -> list[dict[str, Any]]:
        """Each `stats()` of this node's executors (created if need be)."""
        self.options.connect()
        names = executor_names(*_place(), self.options.tool_executors)
        job = job_id()
        handles = [self._handle((job, self.options.namespace, name)) for name in names]
        return list(await asyncio.gather(*(handle.stats.remote() for handle in handles)))

    def _pool(self, loop: asyncio.AbstractEventLoop) -> _Pool:
        o = self.options
        job = job_id()
        key = (job, o.namespace, o.tool_executors)
        pools = _pools.get(loop)
        if pools is None:
            pools = _pools[loop] = {}
        pool = pools.get(key)
        if pool is None:
            names = executor_names(*_place(), o.tool_executors)
            pool = pools[key] = _Pool([_Slot(name, (job, o.namespace, name)) for name in names])
        return pool

    def _join(self, slot: _Slot, trip: tuple[str, int], call: _Call) -> None:
        """Add `call` to the batch of its trip that `slot` gathers this turn (the first
        call schedules the send for the end of the turn). Calls of other trips go in
        other batches: a batch is answered when its last call ends, which the agent
        loop waits for anyway within a trip, but another run should not."""
        batch = slot.pending.get(trip)
        if batch is None:
            batch = slot.pending[trip] = _Batch(slot, trip, self._handle(slot.known))
            asyncio.get_running_loop().call_soon(self._flush, batch)
        batch.calls.append(call)
        call.batch = batch
        slot.in_flight += 1

    def _flush(self, batch: _Batch) -> None:
        slot = batch.slot
        if slot.pending.get(batch.trip) is batch:
            del slot.pending[batch.trip]
        if not batch.calls:
            return  # every waiter left before the send
        batch.tools = dict(call.shipped for call in batch.calls)
        tools = {
            key: data for key, data in batch.tools.items() if (*slot.known, key) not in _shipped
        }
        try:
            batch.ref = batch.handle.run.remote([c.spec for c in batch.calls], tools or None)
        except Exception as exc:  # an argument or context that cannot be pickled
            batch.answered = True
            slot.in_flight -= len(batch.calls)
            _settle(batch, exc)
            return
        spawn(self._receive(batch))

    async def _receive(self, batch: _Batch) -> None:
        slot = batch.slot
        try:
            answer = await batch.ref
            for _ in range(SHIPPING_ATTEMPTS):
                if not isinstance(answer, UnknownTools) or batch.abandoned == len(batch.calls):
                    break  # known now, or nobody waits any more
                # A restarted (or new) executor: send the tools it lacks along.
                ask = set(answer.keys)
                tools = {key: data for key, data in batch.tools.items() if key in ask}
                batch.ref = batch.handle.run.remote([c.spec for c in batch.calls], tools)
                answer = await batch.ref
        except RayActorError as exc:
            _lost(slot.name)
            _settle(batch, RESEND if _exited_on_purpose(exc) else exc)
            return
        except RayError as exc:
            _settle(batch, exc)
            return
        finally:
            batch.answered = True
            slot.in_flight -= len(batch.calls)
        if isinstance(answer, Retiring):
            slot.passed_over_until = time.monotonic() + PASS_OVER
            _settle(batch, RESEND)
            return
        if isinstance(answer, UnknownTools):
            _settle(batch, ToolExecutionError(f"tool executor {slot.name} does not take the tool"))
            return
        _shipped.update((*slot.known, key) for key in batch.tools)
        for call in batch.calls:
            outcome = answer.get(call.spec.key)
            _deliver(call, outcome if outcome is not None else _missing(slot.name))

    def _handle(self, cache_key: tuple[str, str, str]) -> Any:
        o = self.options
        name = cache_key[2]
        handle = _handles.get(cache_key)
        if handle is None:
            node, _ = _place()
            handle = _handles[cache_key] = named_actor(
                ToolExecutor,
                name,
                o.namespace,
                o.tool_executor_idle,
                max_restarts=0,  # made anew by name instead: see _exited_on_purpose
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
            )
        return handle


async def _delivery(call: _Call, backstop: float | None, tool: Tool[..., Any]) -> Delivery:
    """Wait for `call`'s outcome; on leaving early, the call is abandoned."""
    try:
        if backstop is None:
            return await call.future  # cancelling the wait cancels this future: ours
        wait = max(0.0, backstop - asyncio.get_running_loop().time())
        return await asyncio.wait_for(call.future, wait)
    except asyncio.CancelledError:
        _abandon(call)
        raise
    except asyncio.TimeoutError:
        _abandon(call)
        raise timed_out(tool) from None


def _abandon(call: _Call) -> None:
    """The waiter of `call` is gone: take the call out of its batch if not sent yet, else
    cancel it on the executor (the whole remote call once every waiter is gone)."""
    batch = call.batch
    if batch is None or batch.answered:
        return
    if batch.ref is None:
        batch.calls.remove(call)
        batch.slot.in_flight -= 1
        return
    batch.abandoned += 1
    if batch.abandoned == len(batch.calls):
        ray.cancel(batch.ref)
        return
    if batch.cancels is None:
        batch.cancels = []
        asyncio.get_running_loop().call_soon(_send_cancels, batch)
    batch.cancels.append(call.spec.key)


def _lost(name: str) -> None:
    """Drop a dead executor's handle (the next call creates it anew by name) and what it
    knew."""
    for cache_key in [k for k in _handles if k[2] == name]:
        del _handles[cache_key]
    for known in [k for k in _shipped if k[2] == name]:
        _shipped.discard(known)


def _settle(batch: _Batch, delivery: Delivery) -> None:
    for call in batch.calls:
        _deliver(call, delivery)


def _deliver(call: _Call, delivery: Delivery) -> None:
    if not call.future.done():
        call.future.set_result(delivery)


def _send_cancels(batch: _Batch) -> None:
    keys, batch.cancels = batch.cancels or [], None
    if batch.answered or batch.abandoned == len(batch.calls):
        return  # answered meanwhile, or cancelled as a whole
    batch.handle.cancel.remote(keys)


def _pickled_tool(tool: Tool[..., Any]) -> tuple[str, bytes]:
    """The tool as executors get it (what it runs, not its schema), and its key."""
    found = _pickled.get(tool)
    if found is None:
        try:
            data = dumps((tool.fn, tool.ctx_param, tool.name, tool.is_async))
        except Exception as exc:
            raise ToolExecutionError(
                f"tool {tool.name!r} cannot be sent to a tool executor "
                f"({type(exc).__name__}: {exc}); declare it inline=True to run it here",
                tool=tool.name,
            ) from None
        found = _pickled[tool] = (hashlib.sha256(data).hexdigest()[:16], data)
    return found


def _place() -> tuple[str, str]:
    """This process's node and the digest of its runtime env (once per job)."""
    job = job_id()
    found = _places.get(job)
    if found is None:
        context = ray.get_runtime_context()
        env = json.dumps(dict(context.runtime_env or {}), sort_keys=True, default=str)
        digest = hashlib.sha256(env.encode()).hexdigest()[:8]
        found = _places[job] = (str(context.get_node_id()), digest)
    return found


def _exited_on_purpose(exc: RayActorError) -> bool:
    """Whether an executor ended by its own decision (idle, retired). It decides so only
    with no call accepted, so nothing of this batch ran. Ray tells it by the exit type in
    the death cause's text only (no field of the exception carries it)."""
    return isinstance(exc, ActorDiedError) and "INTENDED_USER_EXIT" in str(exc)


def _missing(name: str) -> ToolExecutionError:
    return ToolExecutionError(f"tool executor {name} answered without this call's outcome")

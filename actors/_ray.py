"""Small Ray glue shared by the gateways, session hosts and tool executors."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import os
import threading
import warnings
from collections.abc import Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ray

__all__ = [
    "actor_class",
    "awaited",
    "ensure_ray",
    "in_batch_runner",
    "job_id",
    "named_actor",
    "reconstructed",
    "spawn",
]

_init_lock = threading.Lock()
SHOW_RAY_LOGS = "RAYGENT_RAY_LOGS"  # set (to anything): Ray's start-up lines show

# Set by a batch runner for the runs it hosts. Their sessions were routed to it, so it
# serialises them in-process and writes to the store fenced, with no session-host call;
# and it runs their tools that ask for no placement itself (`RayOptions.tools_in_runners`).
in_batch_runner: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "raygent_in_batch_runner", default=False
)
_background: set[asyncio.Task[Any]] = set()


def ensure_ray(address: str | None, namespace: str, init_kwargs: Mapping[str, Any]) -> None:
    """Start or join Ray unless this process is already connected (a driver that called
    `ray.init`, or a Ray worker). Like Ray Data's auto-init: with no address, `ray.init`
    joins the cluster named by RAY_ADDRESS or the latest local one, else starts one;
    `address="auto"` joins a running cluster or fails."""
    if ray.is_initialized():
        return
    with _init_lock:
        if ray.is_initialized():
            return
        options = {**init_kwargs}
        quiet = "logging_level" not in options and not os.environ.get(SHOW_RAY_LOGS)
        if quiet:
            # Ray's start-up lines (INFO, the token-authentication warning) are not the
            # user's business when raygent starts Ray for them: asked for, they show.
            options["logging_level"] = logging.ERROR
        start = functools.partial(ray.init, address=address, namespace=namespace, **options)
        if threading.current_thread() is threading.main_thread():
            start()
        else:
            # Ray ties the processes it starts (GCS, raylet, workers) to the thread that
            # starts them (their parent-death signal): started from a short-lived thread
            # (`execute_sync` in a running loop, as in a notebook, runs on one), they die
            # with it and take this process down at its next Ray call. So Ray is started
            # on a thread that lasts as long as the process.
            _lasting_thread().submit(start).result()
        if quiet:
            logging.getLogger("ray").setLevel(logging.INFO)  # what Ray says from now on


@functools.cache
def _lasting_thread() -> ThreadPoolExecutor:
    """One worker thread, kept for the life of the process (held here, never shut down
    before the interpreter's exit)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="raygent-ray")


def job_id() -> str:
    """The Ray job this process belongs to: handles cached under another job (before a
    `ray.shutdown()` and a new `ray.init()`) are stale.

    Asked on every model request: kept per connection (Ray makes a new core worker for
    each `ray.init`), since reading it from the runtime context costs a request ~10 us."""
    global _job
    core = getattr(ray._private.worker.global_worker, "core_worker", None)
    known = _job
    if core is not None and known is not None and known[0] is core:
        return known[1]
    found = str(ray.get_runtime_context().get_job_id())
    if core is not None:
        _job = (core, found)
    return found


_job: tuple[object, str] | None = None  # (the core worker, its job id)


async def awaited(ref: Any) -> Any:
    """Await a Ray object; if the awaiting task is cancelled (an abort, a timeout, a
    cancelled run), cancel the remote work too, instead of leaving it running unobserved."""
    try:
        return await ref
    except asyncio.CancelledError:
        ray.cancel(ref)
        raise


@functools.cache
def actor_class(cls: type) -> Any:
    """`ray.remote(cls)`, made once per process: each `ray.remote` is a new actor class
    for Ray to export."""
    return ray.remote(cls)


def reconstructed() -> bool:
    """Whether this process is an actor that Ray restarted (after its process died):
    what it knew is gone, and others may still act on it."""
    try:
        with warnings.catch_warnings():  # Ray reads its own deprecated `actor_id` here
            warnings.simplefilter("ignore", DeprecationWarning)
            return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # not in an actor (a unit test drives the class in-process)
        return False


def spawn(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    """Run `coro` as a task of its own, held until it ends (the loop holds tasks weakly)."""
    task = asyncio.get_running_loop().create_task(coro)
    _background.add(task)
    task.add_done_callback(_background.discard)
    return task


def named_actor(
    cls: type,
    name: str,
    namespace: str,
    *args: Any,
    detached: bool = True,
    max_restarts: int = -1,
    max_concurrency: int = 10_000,
    **options: Any,
) -> Any:
    """The actor named `name` in `namespace`, made of `cls(*args)` if it does not exist
    yet: a service every process of the cluster shares (gateways, session hosts, tool
    executors). It asks for no CPU (it waits, it does not work); `max_concurrency` calls
    at once; never retried by Ray (callers retry what is safe to)."""
    return (
        actor_class(cls)
        .options(
            name=name,
            namespace=namespace,
            get_if_exists=True,
            lifetime="detached" if detached else None,
            max_concurrency=max_concurrency,
            num_cpus=0,
            max_restarts=max_restarts,
            max_task_retries=0,
            **options,
        )
        .remote(*args)
    )

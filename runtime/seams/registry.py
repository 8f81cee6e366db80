"""Where runs execute: `raygent.init(...)` picks the backend; `current_backend()` is it.

Ray is the default. Until `init` is called, `current_backend()` is a Ray backend that
starts or joins Ray on first use, the way Ray Data does (`ray.init()` with no address
joins the cluster named by RAY_ADDRESS or the latest local one, else starts one), unless
the RAYGENT_BACKEND environment variable says `local`. This module is the one place that
default lives.

The core never names the Ray backend: a backend package registers a `BackendPlugin`
under the entry-point group `raygent.backends` (raygent's own `ray` is
`raygent.actors:PLUGIN`, pyproject.toml), and this registry loads it when first needed.
"""

from __future__ import annotations

import functools
import os
import threading
from importlib.metadata import entry_points
from typing import Any

from .contract import Backend, BackendPlugin
from .local import LOCAL
from .request import Tenant

__all__ = [
    "ENTRY_POINTS",
    "backend_plugin",
    "current_backend",
    "init",
    "register_tenant",
    "use_backend",
]

ENTRY_POINTS = "raygent.backends"

BACKEND_ENV = "RAYGENT_BACKEND"

_lock = threading.Lock()
_current: Backend | None = None
_default_ray: Backend | None = None  # built on first need, Ray joined on first use


@functools.cache
def backend_plugin(name: str) -> BackendPlugin:
    """The backend registered as `name` in the entry-point group `raygent.backends`."""
    found = entry_points(group=ENTRY_POINTS, name=name)
    if not found:
        raise ValueError(
            f"no raygent backend named {name!r} is installed (entry points of the group "
            f"{ENTRY_POINTS!r}: {sorted(e.name for e in entry_points(group=ENTRY_POINTS))})"
        )
    plugin: BackendPlugin = next(iter(found)).load()
    return plugin


def init(
    backend: str = "ray",
    *,
    address: str | None = None,
    namespace: str = "raygent",
    options: Any = None,
    **ray_init_kwargs: Any,
) -> Backend:
    """Choose the backend of every agent built without `backend=`, and return it.

    `"ray"` starts or joins Ray now: `address="auto"` joins a running cluster (an error
    if there is none), `None` joins one if found, else starts a local one;
    `ray_init_kwargs` go to `ray.init`. If this process is already connected to Ray (it
    called `ray.init`, or it is a Ray worker), that Ray is used as it is. Gateways are
    named actors in `namespace`; `options` (`raygent.actors.RayOptions`) tunes gateway
    replicas, detached gateways, 429 retries, stream batching and tool CPUs.
    `"local"` runs everything in this process. Any other name is a backend registered
    in the entry-point group `raygent.backends`.
    """
    global _current
    if backend == "local":
        chosen = LOCAL
    else:
        chosen = backend_plugin(backend).connect(
            address=address, namespace=namespace, options=options, init_kwargs=ray_init_kwargs
        )
    with _lock:
        _current = chosen
    return chosen


def use_backend(backend: Backend | None) -> Backend | None:
    """Make `backend` this process's current one (a Ray batch runner takes its driver's,
    so that the runs it hosts go through the same gateways); None goes back to the
    default. Returns the choice it replaces (None: the default), to restore it later."""
    global _current
    with _lock:
        previous, _current = _current, backend
    return previous


def current_backend() -> Backend:
    """The backend chosen by `init`, else the default (see the module docstring)."""
    chosen = _current  # (read without the lock: every run asks, and a read is atomic)
    if chosen is not None:
        return chosen
    with _lock:
        if _current is not None:
            return _current
        choice = os.environ.get(BACKEND_ENV, "ray").strip().lower() or "ray"
        if choice == "local":
            return LOCAL
        if choice != "ray":
            raise ValueError(f"{BACKEND_ENV} must be 'ray' or 'local', not {choice!r}")
        global _default_ray
        if _default_ray is None:
            _default_ray = backend_plugin("ray").default()
        return _default_ray


def register_tenant(*tenants: Tenant) -> None:
    """Register `tenants` by name with the current backend, for runs to name them
    (`tenant="acme"`): in this process, or on Ray cluster-wide in the gateway, where
    every driver sees the same (`seams.tenants`). A name registered again is replaced."""
    registry = current_backend().tenants
    for tenant in tenants:
        registry.register(tenant)

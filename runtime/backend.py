"""Where runs execute: `raygent.init(...)` picks the backend; `current_backend()` is it.

Ray is the default. Until `init` is called, `current_backend()` is a Ray backend that
starts or joins Ray on first use, the way Ray Data does (`ray.init()` with no address
joins the cluster named by RAY_ADDRESS or the latest local one, else starts one), unless
the RAYGENT_BACKEND environment variable says `local`. This module is the one place that
default lives.

`runtime/` never imports Ray: the Ray backend (`raygent.actors`) is imported on demand.
"""

from __future__ import annotations

import importlib
import os
import threading
from typing import TYPE_CHECKING, Any, Literal

from .seams import LOCAL, Backend

if TYPE_CHECKING:
    # mypy knows the actors/ folder as `actors` (see actors/_core.py); never run.
    from actors import RayOptions

__all__ = ["current_backend", "init"]

BACKEND_ENV = "RAYGENT_BACKEND"

_lock = threading.Lock()
_current: Backend | None = None
_default_ray: Backend | None = None  # built on first need, Ray joined on first use


def init(
    backend: Literal["ray", "local"] = "ray",
    *,
    address: str | None = None,
    namespace: str = "raygent",
    options: RayOptions | None = None,
    **ray_init_kwargs: Any,
) -> Backend:
    """Choose the backend of every agent built without `backend=`, and return it.

    `"ray"` starts or joins Ray now: `address="auto"` joins a running cluster (an error
    if there is none), `None` joins one if found, else starts a local one;
    `ray_init_kwargs` go to `ray.init`. If this process is already connected to Ray (it
    called `ray.init`, or it is a Ray worker), that Ray is used as it is. Gateways are
    named actors in `namespace`; `options` (`raygent.actors.RayOptions`) tunes gateway
    replicas, detached gateways, 429 retries, stream batching and tool CPUs.
    `"local"` runs everything in this process.
    """
    global _current
    if backend == "local":
        chosen = LOCAL
    elif backend == "ray":
        actors = importlib.import_module("raygent.actors")
        chosen = actors.connect(
            address=address, namespace=namespace, options=options, init_kwargs=ray_init_kwargs
        )
    else:
        raise ValueError(f"backend must be 'ray' or 'local', not {backend!r}")
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
            _default_ray = importlib.import_module("raygent.actors").ray_backend()
        return _default_ray

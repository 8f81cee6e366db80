"""The Ray `Backend`: model gateways, tool executors and tasks, session hosts and batch
runners, plugged into the loop."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import ModuleType
from typing import Any

import ray.cloudpickle

from raygent.backend import Backend

from ._options import RayOptions
from .batch.execution import RayBatchRunners
from .gateway.access import RayModelAccess
from .gateway.budgets import RayBudgets
from .gateway.tenants import RayTenants
from .sessions.persistence import RaySessions
from .tools.execution import RayToolExecution

__all__ = ["PLUGIN", "RayPlugin", "connect", "ray_backend", "ship_by_value"]


def ray_backend(options: RayOptions | None = None) -> Backend:
    """A Ray backend. It starts or joins Ray on first use (a request, a tool call), not
    now; models and tools that run in-process never need Ray at all. Picklable: an agent
    built with it can be shipped to Ray workers."""
    options = options or RayOptions()
    return Backend(
        "ray",
        RayModelAccess(options),
        RayToolExecution(options),
        RaySessions(options),
        RayBatchRunners(options, ray_backend),
        RayBudgets(options),
        RayTenants(options),
    )


def connect(
    address: str | None = None,
    namespace: str = "raygent",
    options: RayOptions | None = None,
    init_kwargs: Mapping[str, Any] | None = None,
) -> Backend:
    """Start or join Ray now (unless this process is connected already: then the running
    Ray is used as it is) and return a Ray backend whose gateways live in `namespace`."""
    options = replace(
        options or RayOptions(),
        address=address,
        namespace=namespace,
        init_kwargs=dict(init_kwargs or {}),
    )
    options.connect()
    return ray_backend(options)


def ship_by_value(module: ModuleType) -> None:
    """Pickle what `module` (a package: with its submodules) defines by value when it
    travels to Ray workers, instead of by reference: for code that exists only where the
    driver runs (a script's folder), which workers could not import."""
    ray.cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]


class RayPlugin:
    """The Ray backend as the core finds it: the entry point `ray` of the group
    `raygent.backends` (`raygent.seams.BackendPlugin`)."""

    def default(self) -> Backend:
        return ray_backend()

    def connect(
        self,
        *,
        address: str | None,
        namespace: str,
        options: Any,
        init_kwargs: Mapping[str, Any],
    ) -> Backend:
        if options is not None and not isinstance(options, RayOptions):
            raise TypeError(f"options must be raygent.actors.RayOptions, not {options!r}")
        return connect(address, namespace, options, init_kwargs)

    def map_dataset(self, dataset: Any, executable: Any, **options: Any) -> Any:
        from .batch.data_stage import map_dataset  # imports Ray Data: only when a stage is built

        return map_dataset(dataset, executable, **options)

    def ship_by_value(self, module: ModuleType) -> None:
        ship_by_value(module)


PLUGIN = RayPlugin()

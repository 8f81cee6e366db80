"""The Ray backend's options, defined once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raygent.backend import RetryPolicy

__all__ = ["RayOptions", "RetryPolicy"]


@dataclass(frozen=True)
class RayOptions:
    """How the Ray backend connects and runs.

    - `address`, `namespace`, `init_kwargs`: used by `ray.init` when the backend has to
      start or join Ray itself (nothing is done if this process is already connected);
      gateways, session hosts and runners are named actors in `namespace`.
    - `replicas`: gateway actors every endpoint's bound is split over (floor/ceil),
      never multiplied; one is enough for thousands of lease holders. Every process
      must use the same number.
    - `lease_ttl`: seconds a process keeps its slice of a bound without hearing from
      the gateway; a process that dies gives its slice back after this long.
      `lease_idle`: seconds a process keeps a slice it does not use before giving it
      back. `gateway_idle_timeout`: seconds a gateway with no lease holder lives on
      (gateways are detached: they outlive the driver that made them, not the work).
    - `detached`: session hosts outlive the driver that created them (for several
      drivers sharing one cluster over time); by default they end with the creating job.
    - `retry`: how 429s are sent again (`RetryPolicy`, the core's access layer's, as
      locally; on Ray every holder of the endpoint pauses for a Retry-After).
    - `tool_executors`: tool executors per node. A tool that asks for no placement runs
      on an executor of the caller's node: a long-lived actor (no CPU reserved) running
      many calls at once, async tools on its loop, sync tools in threads. Each call goes
      to the executor with the fewest calls in flight from its process; more executors
      spread sync tools that hold the GIL over more processes.
    - `tool_executor_idle`: seconds without a call after which an executor exits (it
      outlives the process that created it; the next call creates it anew).
    - `tools_in_runners`: a batch runner runs the tools that ask for no placement in
      its own process (sync tools in threads, async ones on its loop, as in-process), not
      on the node's executors. Measured here, an executor call costs 2-4 ms of CPU across
      the two processes, as much as the rest of a one-tool agent run; in a runner (a
      disposable worker of its own) it buys little: a tool that kills its runner costs
      its items another attempt on a new runner. False sends them to executors, as
      drivers always do (a notebook or a script must not share a crashing or GIL-bound
      tool's fate).
    - `tool_num_cpus`: CPUs reserved by the task of a tool that needs placement
      (`resources` or `runtime_env`) but declares no `num_cpus`. Executors reserve none.
    - `runner_num_cpus`: CPUs each batch runner reserves (0: runners are placed by
      spreading alone, and may land on a head node that takes no tasks; a little, such
      as 0.1, keeps them on nodes with CPUs to give).
    - `tool_cancel_grace`: seconds a cancelled tool (timed out, run aborted) has to stop
      on its interrupt. A tool task still running then has its worker process killed; a
      tool on an executor makes its executor retire (it takes no new calls and exits once
      its other calls end, which ends the stuck tool).
    """

    address: str | None = None
    namespace: str = "raygent"
    init_kwargs: Mapping[str, Any] = field(default_factory=dict)
    replicas: int = 1
    lease_ttl: float = 10.0
    lease_idle: float = 2.0
    gateway_idle_timeout: float = 600.0
    detached: bool = False
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    tool_executors: int = 2
    tool_executor_idle: float = 600.0
    tools_in_runners: bool = True
    tool_num_cpus: float = 1.0
    tool_cancel_grace: float = 1.0
    runner_num_cpus: float = 0.0

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, not {self.replicas}")
        if self.lease_ttl <= 0 or self.lease_idle < 0 or self.gateway_idle_timeout <= 0:
            raise ValueError("lease_ttl and gateway_idle_timeout must be > 0, lease_idle >= 0")
        if self.tool_cancel_grace < 0:
            raise ValueError(f"tool_cancel_grace must be >= 0, not {self.tool_cancel_grace}")
        if self.tool_executors < 1:
            raise ValueError(f"tool_executors must be >= 1, not {self.tool_executors}")
        if self.tool_executor_idle <= 0:
            raise ValueError(
                f"tool_executor_idle must be positive seconds, not {self.tool_executor_idle}"
            )
        if self.tool_num_cpus < 0:
            raise ValueError(f"tool_num_cpus must be >= 0, not {self.tool_num_cpus}")
        if self.runner_num_cpus < 0:
            raise ValueError(f"runner_num_cpus must be >= 0, not {self.runner_num_cpus}")

    def connect(self) -> None:
        """Start or join Ray unless this process is connected already."""
        from ._ray import ensure_ray

        ensure_ray(self.address, self.namespace, self.init_kwargs)

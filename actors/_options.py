"""The Ray backend's options, defined once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._gateway_actor import RetryPolicy, StreamBatching

__all__ = ["RayOptions"]


@dataclass(frozen=True)
class RayOptions:
    """How the Ray backend connects and runs.

    - `address`, `namespace`, `init_kwargs`: used by `ray.init` when the backend has to
      start or join Ray itself (nothing is done if this process is already connected);
      gateways are named actors in `namespace`.
    - `replicas`: gateway actors per endpoint; the endpoint's bound is split among them
      (floor/ceil), never multiplied. Every process must use the same number for an
      endpoint.
    - `detached`: gateways outlive the driver that created them (for several drivers
      sharing one cluster over time); by default they end with the creating job.
    - `retry`: how gateways retry 429s. `batching`: how streamed chunks are batched.
    - `tool_num_cpus`: CPUs reserved by a tool task whose tool declares none (Ray's own
      default is 1; 0 lets I/O-bound tools run many to a core, one worker process each).
    - `runner_num_cpus`: CPUs each batch runner reserves (0: runners are placed by
      spreading alone, and may land on a head node that takes no tasks; a little, such
      as 0.1, keeps them on nodes with CPUs to give).
    - `tool_cancel_grace`: seconds a cancelled tool task (timed out, run aborted) has to
      stop on its KeyboardInterrupt before its worker process is killed.
    """

    address: str | None = None
    namespace: str = "raygent"
    init_kwargs: Mapping[str, Any] = field(default_factory=dict)
    replicas: int = 1
    detached: bool = False
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    batching: StreamBatching = field(default_factory=StreamBatching)
    tool_num_cpus: float = 1.0
    tool_cancel_grace: float = 1.0
    runner_num_cpus: float = 0.0

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, not {self.replicas}")
        if self.tool_cancel_grace < 0:
            raise ValueError(f"tool_cancel_grace must be >= 0, not {self.tool_cancel_grace}")
        if self.tool_num_cpus < 0:
            raise ValueError(f"tool_num_cpus must be >= 0, not {self.tool_num_cpus}")
        if self.runner_num_cpus < 0:
            raise ValueError(f"runner_num_cpus must be >= 0, not {self.runner_num_cpus}")

    def connect(self) -> None:
        """Start or join Ray unless this process is connected already."""
        from ._ray import ensure_ray

        ensure_ray(self.address, self.namespace, self.init_kwargs)

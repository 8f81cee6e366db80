"""How many runners a batch uses, and how its concurrency is split among them."""

from __future__ import annotations

import math

import ray

__all__ = ["PER_RUNNER", "runner_count", "split_slots"]

PER_RUNNER = 128  # attempts in flight one runner takes by default


def runner_count(concurrency: int, runners: int | None) -> int:
    """How many runners a batch uses: `runners`, else one per `PER_RUNNER` of
    concurrency, at most one per CPU of the cluster; never more than `concurrency`."""
    if runners:
        wanted = runners
    else:
        resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
        cpus = int(resources.get("CPU", 1)) or 1
        wanted = min(math.ceil(concurrency / PER_RUNNER), cpus)
    return max(1, min(wanted, concurrency))


def split_slots(total: int, parts: int) -> list[int]:
    """`total` slots over `parts` runners, floor/ceil: never more than `total` in all."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]

"""`raygent.estimate`: what a job will cost, from a random sample of it run for real.

    guess = await raygent.estimate(agent, "questions.jsonl", sample=50)
    print(guess)  # 10,000 items: ~$41.20 ($38.90 to $43.50), 5.1M tokens, ...

The items are read once (a seeded reservoir sample, in bounded memory: any input
`raygent.batch` takes), the sample runs through `raygent.batch`, and the totals are
projected from the sample's means, with a 95% interval from its spread (Student's t,
with the finite-population correction: a sample of the whole job has no spread). The
wall time is the job at its concurrency bound: items / (bound / median item latency).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..usage import total_cost
from .call import DEFAULT_CONCURRENCY, batch
from .sources import open_items

__all__ = ["Estimate", "estimate"]

CONFIDENCE = 0.95


class Estimate(BaseModel):
    """A job's projected totals from a sample (`raygent.estimate`).

    `items`: the job's size; `sample`: how many of its items were run; `cost_usd` the
    projected cost, `cost_usd_low` / `cost_usd_high` its 95% interval (None: a model's
    pricing is unknown); `tokens` and `requests` the projected totals; `seconds` the
    projected wall time at the job's concurrency bound."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    items: int
    sample: int
    cost_usd: float | None
    cost_usd_low: float | None
    cost_usd_high: float | None
    tokens: int
    requests: int
    seconds: float

    def __str__(self) -> str:
        cost = "cost unknown (no pricing)"
        if self.cost_usd is not None:
            cost = (
                f"~${self.cost_usd:,.2f} (${self.cost_usd_low:,.2f} to ${self.cost_usd_high:,.2f})"
            )
        return (
            f"{self.items:,} items: {cost}, {self.tokens:,} tokens, {self.requests:,} "
            f"requests, ~{self.seconds:,.0f} s (from a sample of {self.sample})"
        )


async def estimate(
    executable: Any,
    items: Any,
    sample: int = 50,
    concurrency: int | None = None,
    seed: int | None = None,
) -> Estimate:
    """Run a seeded random sample of `sample` items of the job for real (through
    `raygent.batch`, at `concurrency`) and project the job's totals (see `Estimate`)."""
    if not isinstance(sample, int) or sample < 1:
        raise ValueError(f"sample must be a positive int, not {sample!r}")
    total, chosen = await _reservoir(items, sample, random.Random(seed))
    bound = concurrency or DEFAULT_CONCURRENCY
    if not chosen:
        return Estimate(
            items=0, sample=0, cost_usd=0.0, cost_usd_low=0.0, cost_usd_high=0.0,
            tokens=0, requests=0, seconds=0.0,
        )  # fmt: skip
    result = await batch(executable, chosen, concurrency=min(bound, len(chosen)), progress=False)
    ran = result.items
    costs = [total_cost(item.usage) for item in ran]
    tokens = [item.usage.total_tokens for item in ran]
    requests = [item.usage.requests for item in ran]
    latencies = [item.latency for item in ran if item.latency is not None]
    n = len(ran)
    cost = low = high = None
    if all(c is not None for c in costs):
        cost, low, high = _projected([float(c or 0.0) for c in costs], total)
    limit = getattr(getattr(executable, "model", None), "max_concurrency", None)
    in_flight = min(bound, limit) if limit else bound
    # The median: the sample's first items pay for starting up (pools, runners).
    latency = statistics.median(latencies) if latencies else 0.0
    return Estimate(
        items=total,
        sample=n,
        cost_usd=cost,
        cost_usd_low=low,
        cost_usd_high=high,
        tokens=round(statistics.fmean(tokens) * total),
        requests=round(statistics.fmean(requests) * total),
        seconds=total * latency / in_flight,
    )


def _projected(values: list[float], total: int) -> tuple[float, float, float]:
    """The total over `total` items from a sample's values: the mean times the total,
    and its interval (t, finite-population corrected)."""
    n = len(values)
    mean = statistics.fmean(values)
    point = mean * total
    if n < 2 or n >= total:
        return point, point, point
    spread = statistics.stdev(values) / math.sqrt(n) * math.sqrt((total - n) / (total - 1))
    half = _t(CONFIDENCE, n - 1) * spread * total
    return point, max(0.0, point - half), point + half


def _t(confidence: float, dof: int) -> float:
    """Student's t quantile (two-sided `confidence`), by the Cornish-Fisher expansion of
    the normal quantile (within 0.3% of the table from 5 degrees of freedom)."""
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    v = float(dof)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
    )


async def _reservoir(items: Any, size: int, rng: random.Random) -> tuple[int, list[Any]]:
    """(how many items there are, a uniform sample of `size` of them, in input order)."""
    source = open_items(items)
    kept: list[tuple[int, Any]] = []
    count = 0
    try:
        rows = source.rows
        if isinstance(rows, AsyncIterator):
            async for row in rows:
                count = _keep(kept, row, count, size, rng)
        else:
            for row in rows:
                count = _keep(kept, row, count, size, rng)
    finally:
        await source.aclose()
    return count, [row for _, row in sorted(kept, key=lambda pair: pair[0])]


def _keep(kept: list[tuple[int, Any]], row: Any, count: int, size: int, rng: random.Random) -> int:
    if count < size:
        kept.append((count, row))
    else:
        slot = rng.randrange(count + 1)
        if slot < size:
            kept[slot] = (count, row)
    return count + 1

"""The ways an item's trips can go (provider batch, flex, standard, priority), what each
costs and how long it takes: the vocabulary the planner and the job's policy share.

What a way takes is known from the store's history of recent timings (see `learn`), or,
with none, from these documented defaults (each learnt over as the job goes):

- a provider batch's turnaround (submission to end): median 30 minutes, spread 1.0 (a
  95th percentile of ~2.6 hours), 1% of batches stalling (not ended in time: OpenAI's
  and Anthropic's 24-hour windows, Gemini's 48, Bedrock's 72);
- a standard request's latency: 1 second plus 60 output tokens a second, spread 0.5;
  flex 2.5 times that with 5% of requests refused for capacity (sent again at standard);
  priority 0.7 times that.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ._lognormal import LogNormal

__all__ = [
    "DEFAULT_BATCH",
    "ONLINE",
    "WAYS",
    "BatchTime",
    "Capacity",
    "Knowledge",
    "OnlineTime",
    "Way",
    "default_online",
    "tiers_of",
]

Way = Literal["batch", "flex", "standard", "priority"]
WAYS: tuple[Way, ...] = ("batch", "flex", "standard", "priority")
ONLINE: tuple[Way, ...] = ("flex", "standard", "priority")

# The service tier each online way asks for, by the model's provider (None: ask for no
# tier, as the run does). Anthropic sells priority by commitment, not per request, and
# has no flex: its ways are its batch API and standard.
_TIERS: dict[str, dict[Way, str | None]] = {
    "openai": {"flex": "flex", "standard": "default", "priority": "priority"},
    "anthropic": {"standard": None},
    "gemini": {"flex": "flex", "standard": "standard", "priority": "priority"},
    "bedrock": {"flex": "flex", "standard": "default", "priority": "priority"},
}


def tiers_of(provider: str) -> Mapping[Way, str | None]:
    """The online ways a provider sells per request, and the tier each asks for (an
    unknown provider: standard only)."""
    return _TIERS.get(provider, {"standard": None})


@dataclass(frozen=True, slots=True)
class BatchTime:
    """One round of a provider batch: its `turnaround` (submission to end) and the share
    of batches that `stall` (do not end in time at all)."""

    turnaround: LogNormal
    stall: float = 0.0


@dataclass(frozen=True, slots=True)
class OnlineTime:
    """One online request at a tier: its `latency`, and the share `refused` for
    capacity (flex: each is sent again at standard, billed once)."""

    latency: LogNormal
    refused: float = 0.0


DEFAULT_BATCH = BatchTime(LogNormal(1800.0, 1.0), stall=0.01)
# Online capacity is planned at 80% of what latency and limits allow: the client's own
# time, queueing for a slot and 429s take the rest.
BUSY_MARGIN = 1.25
_FLEX_SLOWER, _FLEX_REFUSED, _PRIORITY_FASTER = 2.5, 0.05, 0.7


def default_online(output_tokens: float) -> dict[Way, OnlineTime]:
    """The documented defaults of the online ways, for replies of `output_tokens`."""
    standard = LogNormal(1.0 + output_tokens / 60.0, 0.5)
    return {
        "flex": OnlineTime(LogNormal(standard.median * _FLEX_SLOWER, 0.6), _FLEX_REFUSED),
        "standard": OnlineTime(standard),
        "priority": OnlineTime(LogNormal(standard.median * _PRIORITY_FASTER, 0.4)),
    }


@dataclass(frozen=True, slots=True)
class Knowledge:
    """What is known of how long each way takes (learnt, or the defaults)."""

    batch: BatchTime = DEFAULT_BATCH
    online: Mapping[Way, OnlineTime] = field(default_factory=lambda: default_online(300.0))

    def latency(self, way: Way) -> OnlineTime:
        found = self.online.get(way)
        if found is not None:
            return found
        return default_online(300.0)[way]


@dataclass(frozen=True, slots=True)
class Capacity:
    """What bounds the job's online throughput: the requests in flight at once, and the
    model's rate limits (None: none known)."""

    concurrency: int
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None

    def seconds(
        self, trips: Mapping[Way, float], latency: Mapping[Way, float], tokens: float
    ) -> float:
        """The seconds `trips` online requests (by way) keep the job's online capacity
        busy: the most of what concurrency (each request holds a slot for its mean
        `latency`), requests a minute and tokens a minute (`tokens` a request) allow,
        with `BUSY_MARGIN`."""
        held = sum(n * latency[w] for w, n in trips.items()) / max(self.concurrency, 1)
        count = sum(trips.values())
        rated = 0.0
        if self.requests_per_minute:
            rated = count * 60.0 / self.requests_per_minute
        if self.tokens_per_minute:
            rated = max(rated, count * tokens * 60.0 / self.tokens_per_minute)
        return max(held, rated) * BUSY_MARGIN

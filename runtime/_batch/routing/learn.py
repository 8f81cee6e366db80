"""What a job knows of how long each way takes, from the store's history of timings
(`raygent.stores.TimingStore`) and what it sees as it runs.

Each way's time is what was seen (the median of the observed times), its spread the
observed one weighed with the default's as if that were `PRIOR_WEIGHT` observations
(one batch seen does not make the next one certain); with nothing seen, the documented
default (see `ways`). The shares of stalls and refusals are shrunk the same way: a
batch that did not end in time counts as a stall (it took at least that long), a
request refused for capacity as a refusal. Timings live
under a key naming the provider, the endpoint and the model: a history learnt against
one endpoint is not used for another.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ...stores import TimingSample
from ._lognormal import LogNormal
from .ways import ONLINE, BatchTime, Knowledge, OnlineTime, Way, default_online

__all__ = ["PRIOR_WEIGHT", "knowledge_of", "timings_key", "way_of_tier"]

PRIOR_WEIGHT = 2.0  # how many observations the documented defaults count as
_MAX_KEY = 500


def timings_key(model: Any) -> str:
    """The key of a model's timings: its provider, endpoint and name."""
    base = str(getattr(model, "base_url", "") or "")
    key = f"{model.provider}|{base}|{model.name}"
    return key[:_MAX_KEY]


def way_of_tier(tier: str | None) -> Way:
    """The way of a reply, by the tier it says it was served at."""
    if tier == "flex":
        return "flex"
    if tier == "priority":
        return "priority"
    return "standard"


def knowledge_of(
    samples: Sequence[TimingSample],
    *,
    output_tokens: float,
    batch_prior: BatchTime,
) -> Knowledge:
    """Each way's time from `samples` (any order), shrunk towards the defaults."""
    by_way: dict[str, list[TimingSample]] = {}
    for sample in samples:
        by_way.setdefault(sample.way, []).append(sample)
    batch = _batch(by_way.get("batch", []), batch_prior)
    defaults = default_online(output_tokens)
    standard = _online(by_way.get("standard", []), defaults["standard"])
    # A tier never seen is the default's multiple of what standard was seen to take.
    scale = standard.latency.median / defaults["standard"].latency.median
    online: dict[Way, OnlineTime] = {"standard": standard}
    for way in ONLINE:
        if way != "standard":
            prior = defaults[way]
            prior = replace(
                prior, latency=replace(prior.latency, median=prior.latency.median * scale)
            )
            online[way] = _online(by_way.get(way, []), prior)
    return Knowledge(batch=batch, online=online)


def _shrunk(seen: list[float], prior: LogNormal) -> LogNormal:
    """What was seen, with the prior's spread weighed in: the median is the observed
    one (a history that contradicts the default is believed at once: a batch seen to
    take a minute is not a half-hour batch), the spread the pooled deviation of what was
    seen and the prior's, as if it were `PRIOR_WEIGHT` observations."""
    if not seen:
        return prior
    logs = [math.log(max(s, 1e-3)) for s in seen]
    n, k = float(len(logs)), PRIOR_WEIGHT
    mu = sum(logs) / n
    square = sum((x - mu) ** 2 for x in logs) + k * prior.spread**2
    return LogNormal(math.exp(mu), math.sqrt(square / (n + k - 1)))


def _batch(seen: list[TimingSample], prior: BatchTime) -> BatchTime:
    ended = [s.seconds for s in seen if s.ok]
    late = len(seen) - len(ended)
    stall = (late + PRIOR_WEIGHT * prior.stall) / (len(seen) + PRIOR_WEIGHT)
    return BatchTime(_shrunk(ended, prior.turnaround), stall)


def _online(seen: list[TimingSample], prior: OnlineTime) -> OnlineTime:
    served = [s.seconds for s in seen if s.ok]
    refused = len(seen) - len(served)
    share = (refused + PRIOR_WEIGHT * prior.refused) / (len(seen) + PRIOR_WEIGHT)
    return OnlineTime(_shrunk(served, prior.latency), share)

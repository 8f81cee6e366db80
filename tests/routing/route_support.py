"""What the routing tests share: a simulator whose batches take what the test says,
models on it, a store holding a history of timings (what a team's earlier jobs
learnt), and how to read a sink."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import raygent
from raygent._batch.routing.learn import timings_key
from raygent.sim import BatchTimes as SimBatchTimes
from raygent.sim import Latency, ServiceTiers, SimStats, serve
from raygent.stores import InMemoryStore, TimingSample

PRICING = raygent.Pricing(input_per_mtok=1.0, output_per_mtok=4.0)
# Batches gathered and polled quickly: the job's times are scaled down to seconds.
TUNED = raygent.ProviderBatch(gather_seconds=0.2, poll_seconds=0.1)
ITEMS = 40


def simulator(batch: SimBatchTimes, **options: Any) -> Any:
    """A simulator whose OpenAI batches take `batch`; online replies ~30 ms, flex 2x
    that (within the route's default of 2.5x), none refused unless `tiers` says."""
    options.setdefault("latency", Latency(fixed_ms=30))
    options.setdefault("tiers", ServiceTiers(flex_latency=2.0))
    return serve(batch_times={"openai": batch}, **options)


def model_on(sim: Any, **settings: Any) -> raygent.OpenAIModel:
    settings.setdefault("pricing", PRICING)
    settings.setdefault("max_concurrency", 16)
    return raygent.OpenAIModel(
        "gpt-4o-mini", base_url=sim.openai_base_url, api_key="sk-test", **settings
    )


async def history(
    model: Any, *, batch: float, online: float = 0.08, store: Any = None
) -> InMemoryStore:
    """A store holding what earlier jobs saw: batches taking ~`batch` seconds (a
    tenth either way), online replies ~`online` seconds, flex twice that."""
    store = store or InMemoryStore()
    seen = [TimingSample("batch", batch * (0.9 + 0.02 * i)) for i in range(10)]
    seen += [TimingSample("standard", online)] * 20 + [TimingSample("flex", 2 * online)] * 20
    await store.add_timings(timings_key(model), seen)
    return store


async def routed(
    executable: Any, items: Any, seconds: float, store: Any, **options: Any
) -> raygent.BatchResult:
    """A job due in `seconds`, routed with `store`'s history, its batches `TUNED`."""
    options.setdefault("provider_batch", TUNED)
    options.setdefault("progress", False)
    return await raygent.batch(
        executable,
        items,
        deadline=timedelta(seconds=seconds),
        route=raygent.Route(store=store),
        **options,
    )


def sink_keys(sink: Path) -> list[Any]:
    return [json.loads(line)["key"] for line in sink.read_text().splitlines()]


def online_requests(stats: SimStats) -> int:
    return stats.requests - stats.batch_calls


def tiers_asked(sim: Any) -> list[str | None]:
    """The service tier each online chat request asked for."""
    return [
        (r.body or {}).get("service_tier")
        for r in sim.requests
        if r.path == "/v1/chat/completions" and isinstance(r.body, dict)
    ]

"""A tenant's own limits (issue #45, point 4: "each held to its own ... limits"): its
`max_concurrency` caps its requests in flight below the endpoint's bound, and its
`rate_limit` keeps it under a provider that would refuse it otherwise. Counted by the
simulator (its peak in flight, its 429s), never timed; on both backends (a batch's one
runner holds the tenant's limits on Ray)."""

from __future__ import annotations

import raygent
from raygent import GeminiModel, OpenAIModel, RateLimit, Tenant
from raygent.sim import Latency, Reply, Rule, SimRateLimits, Simulator, serve

BOUND = 16


def _agent(sim: Simulator) -> raygent.Agent:
    model = OpenAIModel(
        "sim-gpt", base_url=sim.openai_base_url, api_key="sk-tenants", max_concurrency=BOUND
    )
    return raygent.agent(model=model)


def _items(tenant: Tenant, count: int) -> list[dict[str, object]]:
    return [{"input": f"q{i}", "key": f"k{i}", "tenant": tenant} for i in range(count)]


async def test_a_tenants_max_concurrency_caps_it_below_the_bound(backend_kind: str) -> None:
    capped = Tenant("narrow", max_concurrency=3)
    with serve([Rule(reply=Reply(text="ok"))], latency=Latency(fixed_ms=20)) as sim:
        result = await raygent.batch(
            _agent(sim), _items(capped, 48), concurrency=32, runners=1, progress=False
        )
        peak = sim.stats().peak_in_flight
    assert result.report.succeeded == 48
    assert peak == 3  # its own cap, though the endpoint's bound is 16 and 32 items wait


async def test_a_tenants_rate_limit_keeps_it_under_the_providers(backend_kind: str) -> None:
    # The provider admits 6 a second (a bucket of one second's share) and, as Gemini,
    # states no limit in headers; the tenant holds itself to 4. Without its limit the
    # same job meets 429s (the second case) before they teach the limiter.
    provider = SimRateLimits(requests_per_minute=360, burst_seconds=1)
    for limit, throttled in ((RateLimit(requests_per_minute=240), False), (None, True)):
        tenant = Tenant("paced", rate_limit=limit)
        script = [Rule(reply=Reply(text="ok"))]
        with serve(script, latency=Latency(fixed_ms=5), rate_limits=provider) as sim:
            model = GeminiModel(
                "gemini-2.5-flash", base_url=sim.gemini_base_url, api_key="k", max_concurrency=BOUND
            )
            result = await raygent.batch(
                raygent.agent(model=model),
                _items(tenant, 20),
                concurrency=16,
                runners=1,
                progress=False,
                retry=raygent.Retry(attempts=5, backoff="none"),
            )
            refused = sum(sim.stats().rate_limited.values())
        assert result.report.succeeded == 20
        assert (refused > 0) is throttled, (limit, refused)

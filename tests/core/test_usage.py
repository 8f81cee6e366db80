"""Usage adds up; cost is per channel, fixed when produced, and None when unknown."""

from __future__ import annotations

import pytest

from raygent import Cost, Pricing, Usage, total_cost
from raygent.pricing import lookup_pricing, price_usage

PRICING = Pricing(
    input_per_mtok=2.0,
    output_per_mtok=8.0,
    cached_input_per_mtok=0.5,
    cache_write_per_mtok=2.5,
    cache_write_1h_per_mtok=4.0,
    reasoning_per_mtok=10.0,
)


def test_cost_per_channel_when_input_includes_cache() -> None:
    usage = Usage(
        requests=1,
        input_tokens=1_000_000,
        cached_tokens=200_000,
        cache_write_tokens=100_000,
        cache_write_1h_tokens=40_000,
        output_tokens=500_000,
        reasoning_tokens=100_000,
        input_includes_cache=True,
    )
    cost = PRICING.cost(usage)
    assert cost.input == pytest.approx(0.7 * 2.0)
    assert cost.cached_input == pytest.approx(0.2 * 0.5)
    assert cost.cache_write == pytest.approx(0.06 * 2.5 + 0.04 * 4.0)
    assert cost.output == pytest.approx(0.4 * 8.0)
    assert cost.reasoning == pytest.approx(0.1 * 10.0)
    assert total_cost(cost) == pytest.approx(1.4 + 0.1 + 0.31 + 3.2 + 1.0)


def test_cost_when_input_excludes_cache() -> None:
    usage = Usage(
        requests=1,
        input_tokens=1_000_000,
        cached_tokens=2_000_000,
        cache_write_tokens=1_000_000,
        output_tokens=0,
        input_includes_cache=False,
    )
    cost = PRICING.cost(usage)
    assert cost.input == pytest.approx(2.0)
    assert cost.cached_input == pytest.approx(1.0)
    assert cost.cache_write == pytest.approx(2.5)
    assert usage.total_input_tokens == 4_000_000


def test_unset_cache_and_reasoning_rates_fall_back() -> None:
    flat = Pricing(input_per_mtok=1.0, output_per_mtok=3.0)
    cost = flat.cost(
        Usage(requests=1, input_tokens=10, cached_tokens=4, output_tokens=6, reasoning_tokens=2)
    )
    assert cost.cached_input == pytest.approx(4e-6)
    assert cost.reasoning == pytest.approx(6e-6)
    assert cost.output == pytest.approx(12e-6)


def test_unknown_pricing_gives_none_never_zero() -> None:
    usage = price_usage(
        Usage(requests=1, input_tokens=10, output_tokens=5),
        provider="openai",
        model="no-such-model-zz",
    )
    assert usage.cost is None
    assert total_cost(usage) is None
    assert total_cost(None) is None


def test_declared_pricing_wins_over_the_price_library() -> None:
    usage = Usage(requests=1, input_tokens=1_000_000, output_tokens=0)
    declared = price_usage(usage, provider="openai", model="gpt-4o-mini", declared=PRICING)
    looked_up = price_usage(usage, provider="openai", model="gpt-4o-mini")
    assert declared.cost is not None and declared.cost.input == pytest.approx(2.0)
    assert looked_up.cost is not None and looked_up.cost.input == pytest.approx(0.15)


def test_price_library_tiers_follow_input_size() -> None:
    small = lookup_pricing("anthropic", "claude-sonnet-4-5", input_tokens=1_000)
    large = lookup_pricing("anthropic", "claude-sonnet-4-5", input_tokens=300_000)
    assert small is not None and large is not None
    assert large.input_per_mtok > small.input_per_mtok
    assert small.cache_write_1h_per_mtok is not None


def test_usages_add_and_sum() -> None:
    a = price_usage(
        Usage(requests=1, input_tokens=100, output_tokens=10, cached_tokens=20),
        provider="x",
        model="y",
        declared=PRICING,
    )
    b = price_usage(
        Usage(requests=1, input_tokens=50, output_tokens=5, reasoning_tokens=2),
        provider="x",
        model="y",
        declared=PRICING,
    )
    total = a + b
    assert (total.requests, total.input_tokens, total.output_tokens) == (2, 150, 15)
    assert total.cached_tokens == 20 and total.reasoning_tokens == 2
    assert total.total_tokens == 165
    assert total.cost is not None and a.cost is not None and b.cost is not None
    assert total_cost(total) == pytest.approx(total_cost(a) + total_cost(b))
    assert sum([a, b]) == total
    assert Usage() + a == a
    assert a + Usage() == a


def test_adding_an_unpriced_usage_makes_the_cost_unknown() -> None:
    priced = Usage(requests=1, input_tokens=1, cost=Cost(input=1.0))
    unpriced = Usage(requests=1, input_tokens=1)
    assert (priced + unpriced).cost is None


def test_adding_mixed_cache_conventions_normalises_to_inclusive() -> None:
    openai_style = Usage(requests=1, input_tokens=100, cached_tokens=40)
    anthropic_style = Usage(
        requests=1,
        input_tokens=10,
        cached_tokens=30,
        cache_write_tokens=5,
        input_includes_cache=False,
    )
    total = openai_style + anthropic_style
    assert total.input_includes_cache
    assert total.input_tokens == 100 + 45
    assert total.cached_tokens == 70
    assert total.uncached_input_tokens == 145 - 70 - 5


def test_cost_survives_a_json_round_trip() -> None:
    usage = price_usage(
        Usage(requests=1, input_tokens=123, output_tokens=45),
        provider="x",
        model="y",
        declared=PRICING,
    )
    assert Usage.model_validate_json(usage.model_dump_json()) == usage

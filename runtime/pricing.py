"""Model pricing: declared on a model, or looked up in genai-prices."""

from __future__ import annotations

import functools
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict

from .usage import Cost, Usage

__all__ = ["Pricing", "lookup_pricing", "price_usage"]

_PER_MTOK = 1_000_000


class Pricing(BaseModel):
    """USD per million tokens, per channel; unset cache/reasoning rates fall back."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None
    cache_write_1h_per_mtok: float | None = None
    reasoning_per_mtok: float | None = None

    def cost(self, usage: Usage) -> Cost:
        """The per-channel cost of `usage` at these rates."""
        cached_rate = _or(self.cached_input_per_mtok, self.input_per_mtok)
        write_rate = _or(self.cache_write_per_mtok, self.input_per_mtok)
        write_1h_rate = _or(self.cache_write_1h_per_mtok, write_rate)
        reasoning_rate = _or(self.reasoning_per_mtok, self.output_per_mtok)
        writes_5m = max(0, usage.cache_write_tokens - usage.cache_write_1h_tokens)
        visible_output = max(0, usage.output_tokens - usage.reasoning_tokens)
        return Cost(
            input=usage.uncached_input_tokens * self.input_per_mtok / _PER_MTOK,
            output=visible_output * self.output_per_mtok / _PER_MTOK,
            cached_input=usage.cached_tokens * cached_rate / _PER_MTOK,
            cache_write=(writes_5m * write_rate + usage.cache_write_1h_tokens * write_1h_rate)
            / _PER_MTOK,
            reasoning=usage.reasoning_tokens * reasoning_rate / _PER_MTOK,
        )


def _or(value: float | None, fallback: float) -> float:
    return fallback if value is None else value


def price_usage(
    usage: Usage, *, provider: str, model: str, declared: Pricing | None = None
) -> Usage:
    """Return `usage` with its cost fixed: the declared pricing wins, else genai-prices."""
    pricing = declared or lookup_pricing(provider, model, usage.total_input_tokens)
    if pricing is None:
        return usage if usage.cost is None else usage.model_copy(update={"cost": None})
    return usage.model_copy(update={"cost": pricing.cost(usage)})


def lookup_pricing(provider: str, model: str, input_tokens: int = 0) -> Pricing | None:
    """Rates for a provider's model from genai-prices, with tiers chosen by input size."""
    prices = _model_prices(provider, model)
    if prices is None:
        return None
    rates = {key: _tiered(value, input_tokens) for key, value in prices.items()}
    input_rate, output_rate = rates.get("input_mtok"), rates.get("output_mtok")
    if input_rate is None or output_rate is None:
        return None
    return Pricing(
        input_per_mtok=input_rate,
        output_per_mtok=output_rate,
        cached_input_per_mtok=rates.get("cache_read_mtok"),
        cache_write_per_mtok=rates.get("cache_write_mtok"),
        cache_write_1h_per_mtok=rates.get("cache_write_1h_mtok"),
    )


@functools.lru_cache(maxsize=256)
def _model_prices(provider: str, model: str) -> dict[str, Any] | None:
    # Looking a model up in genai-prices costs ~130 us; prices are cached per process.
    from genai_prices import Usage as PriceUsage
    from genai_prices import calc_price

    try:
        found = calc_price(PriceUsage(input_tokens=0, output_tokens=0), model, provider_id=provider)
    except LookupError:
        return None
    return {k: v for k, v in vars(found.model_price).items() if not k.startswith("_")}


def _tiered(value: Any, input_tokens: int) -> float | None:
    if value is None:
        return None
    if isinstance(value, Decimal | int | float):
        return float(value)
    # genai-prices' TieredPrices: a crossed tier applies to all tokens ("cliff" pricing).
    rate = value.base
    for tier in value.tiers:
        if input_tokens >= tier.start:
            rate = tier.price
    return float(rate)

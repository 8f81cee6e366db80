"""Model pricing: declared on a model, or looked up in genai-prices."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict

from .usage import Cost, Usage

__all__ = ["Pricing", "lookup_pricing", "price_usage"]

_PER_MTOK = 1_000_000
# What OpenAI's Batch API and Anthropic's Message Batches charge of the online rates.
BATCH_DISCOUNT = 0.5


class Pricing(BaseModel):
    """USD per million tokens, per channel; unset cache/reasoning rates fall back.

    `batch_input_per_mtok` / `batch_output_per_mtok`: the rates of the provider's batch
    API (OpenAI Batch, Anthropic Message Batches); unset, half the online ones (what
    both providers charge). The other channels move with them.

    `flex_multiplier` / `priority_multiplier`: what a reply served at the flex or the
    priority service tier costs of these rates. Unset, flex is charged the batch rates
    (what OpenAI charges for flex) and priority these rates (Anthropic's priority tier
    is bought by commitment, its tokens at the standard rates).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None
    cache_write_1h_per_mtok: float | None = None
    reasoning_per_mtok: float | None = None
    batch_input_per_mtok: float | None = None
    batch_output_per_mtok: float | None = None
    flex_multiplier: float | None = None
    priority_multiplier: float | None = None

    def for_tier(self, tier: str | None) -> Pricing:
        """The rates of a reply served at `tier` (as the provider names the tier it used:
        "flex", "priority", "batch"; any other is the standard tier's)."""
        if tier == "batch" or (tier == "flex" and self.flex_multiplier is None):
            return self.for_batch()
        multiplier = {"flex": self.flex_multiplier, "priority": self.priority_multiplier}
        times = multiplier.get(tier or "")
        if times is None:
            return self
        return Pricing(
            input_per_mtok=self.input_per_mtok * times,
            output_per_mtok=self.output_per_mtok * times,
            cached_input_per_mtok=_times(self.cached_input_per_mtok, times),
            cache_write_per_mtok=_times(self.cache_write_per_mtok, times),
            cache_write_1h_per_mtok=_times(self.cache_write_1h_per_mtok, times),
            reasoning_per_mtok=_times(self.reasoning_per_mtok, times),
        )

    def for_batch(self) -> Pricing:
        """The rates a provider batch API charges: the declared batch rates, else half."""
        in_ratio = _ratio(self.batch_input_per_mtok, self.input_per_mtok)
        out_ratio = _ratio(self.batch_output_per_mtok, self.output_per_mtok)
        return Pricing(
            input_per_mtok=self.input_per_mtok * in_ratio,
            output_per_mtok=self.output_per_mtok * out_ratio,
            cached_input_per_mtok=_times(self.cached_input_per_mtok, in_ratio),
            cache_write_per_mtok=_times(self.cache_write_per_mtok, in_ratio),
            cache_write_1h_per_mtok=_times(self.cache_write_1h_per_mtok, in_ratio),
            reasoning_per_mtok=_times(self.reasoning_per_mtok, out_ratio),
        )

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


def _ratio(batch: float | None, online: float) -> float:
    if batch is None:
        return BATCH_DISCOUNT
    return batch / online if online else 0.0


def _times(value: float | None, ratio: float) -> float | None:
    return None if value is None else value * ratio


def _or(value: float | None, fallback: float) -> float:
    return fallback if value is None else value


def price_usage(
    usage: Usage,
    *,
    provider: str,
    model: str,
    declared: Pricing | None = None,
    batch: bool = False,
    tier: str | None = None,
) -> Usage:
    """Return `usage` with its cost fixed: the declared pricing wins, else genai-prices.
    `batch`: the request went through the provider's batch API (its rates); `tier`: the
    service tier the reply says it was served at (its rates). The tokens of other
    models in it (`usage.other_models`: an advisor's) are priced at each one's own
    rates from genai-prices (the declared pricing is the request's model's), on the same
    terms; the cost is unknown (None) when any of them is."""
    others = usage.other_models
    own = usage if not others else _less(usage, others.values())
    pricing = _pricing(own, provider, model, declared, batch, tier)
    if pricing is None:
        cost: Cost | None = None
    else:
        cost = pricing.cost(own)
    if others:
        priced = {
            name: _priced_as(part, _pricing(part, provider, name, None, batch, tier))
            for name, part in others.items()
        }
        for part in priced.values():
            cost = None if cost is None or part.cost is None else cost + part.cost
        return usage.model_copy(update={"cost": cost, "other_models": priced})
    if cost is None:
        return usage if usage.cost is None else usage.model_copy(update={"cost": None})
    return usage.model_copy(update={"cost": cost})


def _pricing(
    usage: Usage,
    provider: str,
    model: str,
    declared: Pricing | None,
    batch: bool,
    tier: str | None,
) -> Pricing | None:
    if declared is not None:
        return declared.for_tier("batch" if batch else tier)
    return lookup_pricing(provider, model, usage.total_input_tokens, batch=batch, tier=tier)


def _priced_as(usage: Usage, pricing: Pricing | None) -> Usage:
    return usage.model_copy(update={"cost": None if pricing is None else pricing.cost(usage)})


def _less(usage: Usage, parts: Iterable[Usage]) -> Usage:
    """`usage` without the tokens of `parts` (another model's, in the same convention):
    the request's own model's tokens."""
    take = sum(parts, Usage(input_includes_cache=usage.input_includes_cache))
    return usage.model_copy(
        update={
            "input_tokens": usage.input_tokens - take.input_tokens,
            "output_tokens": usage.output_tokens - take.output_tokens,
            "cached_tokens": usage.cached_tokens - take.cached_tokens,
            "cache_write_tokens": usage.cache_write_tokens - take.cache_write_tokens,
            "cache_write_1h_tokens": usage.cache_write_1h_tokens - take.cache_write_1h_tokens,
            "reasoning_tokens": usage.reasoning_tokens - take.reasoning_tokens,
            "other_models": None,
        }
    )


def lookup_pricing(
    provider: str,
    model: str,
    input_tokens: int = 0,
    *,
    batch: bool = False,
    tier: str | None = None,
) -> Pricing | None:
    """Rates for a provider's model from genai-prices, with tiers chosen by input size;
    `batch`: its batch-API rates (genai-prices' where it has them, else half); `tier`: a
    service tier's rates (genai-prices' where it knows the tier for the model, else as
    `Pricing.for_tier` prices an undeclared tier)."""
    if tier == "batch":
        batch, tier = True, None
    prices = _model_prices(provider, model, False)
    if prices is None:
        return None
    if tier in _PRICED_TIERS and not batch:
        tiered = _model_prices(provider, model, False, tier)
        if tiered is not None and tiered != prices:
            prices = tiered
        else:  # genai-prices does not know the tier for this model
            online = lookup_pricing(provider, model, input_tokens)
            return None if online is None else online.for_tier(tier)
    if batch:
        batch_prices = _model_prices(provider, model, True)
        if batch_prices is None or batch_prices == prices:  # no batch variant known
            online = lookup_pricing(provider, model, input_tokens)
            return None if online is None else online.for_batch()
        prices = batch_prices
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


# The service tiers whose own rates genai-prices may know (by the name a reply gives).
_PRICED_TIERS = ("flex", "priority")


@functools.lru_cache(maxsize=256)
def _model_prices(
    provider: str, model: str, batch: bool, tier: str | None = None
) -> dict[str, Any] | None:
    # Looking a model up in genai-prices costs ~130 us; prices are cached per process.
    from genai_prices import Usage as PriceUsage
    from genai_prices import calc_price

    context: dict[str, str] | None = {"processing": "batch"} if batch else None
    if tier is not None:
        context = {"service_tier": tier}
    try:
        found = calc_price(
            PriceUsage(input_tokens=0, output_tokens=0),
            model,
            provider_id=provider,
            price_context=context,
        )
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

"""The ways a model is reached and what a trip costs by each: its provider batch API
(where it has one), and the service tiers its provider sells per request, priced at the
model's declared rates or genai-prices' (batch and tier rates through
`raygent.pricing`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...budgets import pricing_of
from ...pricing import Pricing, lookup_pricing
from ..provider.trip_lines import batch_api_of
from .planner import Demand, Offer
from .ways import Way, tiers_of

__all__ = ["RELATIVE", "offers_of"]

# What each way costs of standard when a model's prices are unknown (OpenAI's batch and
# flex halve the price; priority costs more): enough to rank the ways, not to budget.
RELATIVE: dict[Way, float] = {"batch": 0.5, "flex": 0.5, "standard": 1.0, "priority": 1.75}


def _rates(model: Any, way: Way) -> Pricing | None:
    if way == "batch":
        return pricing_of(model, batch=True)
    if way == "standard":
        return pricing_of(model)
    declared = getattr(model, "pricing", None)
    if isinstance(declared, Pricing):
        return declared.for_tier(way)
    return lookup_pricing(model.provider, model.name, tier=way)


def offers_of(
    model: Any, demand: Demand, allowed: Sequence[Way] | None = None
) -> tuple[tuple[Offer, ...], bool]:
    """The ways `model` supports (of `allowed`), a trip's price by each (USD), and
    whether those are real prices (False: a pricing is unknown, relative prices rank
    the ways)."""
    ways: list[tuple[Way, str | None]] = []
    if batch_api_of(model) is not None:
        ways.append(("batch", None))
    ways.extend(tiers_of(model.provider).items())
    if allowed is not None:
        ways = [(w, t) for w, t in ways if w in allowed]
    rates = {w: _rates(model, w) for w, _ in ways}
    priced = all(r is not None for r in rates.values())
    offers = []
    for way, tier in ways:
        rate = rates[way]
        if priced and rate is not None:
            price = (
                demand.input_tokens * rate.input_per_mtok
                + demand.output_tokens * rate.output_per_mtok
            ) / 1_000_000
        else:
            price = RELATIVE[way]
        offers.append(Offer(way, price, tier))
    return tuple(offers), priced

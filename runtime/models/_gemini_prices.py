"""Gemini's prices, from genai-prices: by prompt length where Gemini prices so, at batch
rates for a batch line, at a service tier's rates."""

from __future__ import annotations

from ..pricing import Pricing, lookup_pricing, price_usage
from ..usage import Usage

PROVIDER = "gemini"
# genai-prices files Gemini under "google" (the Gemini API and Vertex AI alike).
PRICES_PROVIDER = "google"
# Gemini's priority tier costs 75-100% over standard (its pricing page); genai-prices
# does not list it yet, so a priority reply is priced at the top of that range (a
# budget never reserves too little).
PRIORITY_MULTIPLIER = 2.0


def pricing(
    model: str, input_tokens: int, *, batch: bool = False, tier: str | None = None
) -> Pricing | None:
    """Gemini's rates for a reply from genai-prices: by prompt length where Gemini
    prices so (2.5 Pro, 3 Pro above 200k tokens), at batch rates for a batch line, at a
    tier's rates (flex half; priority, unlisted, at `PRIORITY_MULTIPLIER`)."""
    name = model.rsplit("/", 1)[-1]
    if batch:
        return lookup_pricing(PRICES_PROVIDER, name, input_tokens, batch=True)
    standard = lookup_pricing(PRICES_PROVIDER, name, input_tokens)
    if standard is None or tier not in ("flex", "priority"):
        return standard
    found = lookup_pricing(PRICES_PROVIDER, name, input_tokens, tier=tier)
    if tier == "priority" and found == standard:
        return standard.model_copy(update={"priority_multiplier": PRIORITY_MULTIPLIER}).for_tier(
            "priority"
        )
    return found


def priced(
    usage: Usage,
    model: str,
    *,
    batch: bool = False,
    tier: str | None = None,
    declared: Pricing | None = None,
) -> Usage:
    """`usage` with its cost: a declared `Pricing` wins (at the tier or batch rates),
    else `pricing`. Cached-content tokens are priced at the cached rate (explicit and
    implicit caching alike); a cache's storage by the hour is billed apart by Google."""
    if declared is not None:
        return price_usage(
            usage, provider=PROVIDER, model=model, declared=declared, batch=batch, tier=tier
        )
    rates = pricing(model, usage.total_input_tokens, batch=batch, tier=tier)
    if rates is None:
        return usage if usage.cost is None else usage.model_copy(update={"cost": None})
    return usage.model_copy(update={"cost": rates.cost(usage)})

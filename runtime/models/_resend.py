"""A service tier's fallback, resent inside the adapter: a flex request the provider
refused for capacity is sent again at its `Tier`'s fallback tier, the refusal kept on
the response's `attempts` and counted as a request billed at nothing.

The request chain is taking this over (the tier's fallback as a step of the chain, its
bookkeeping done once beside the models' fallback); until it does, this module is the
one place the adapters resend, and `HTTPModel` its only user.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ProviderError, RateLimitError
from ..usage import Cost, Usage
from .contract import ModelOptions, Tier

__all__ = ["TierFallback", "tier_fallback"]


@dataclass
class TierFallback:
    """A request's `Tier` with a fallback: the body to send again when the provider
    refused the tier for capacity, and the refusals it answered (the response's
    `attempts`)."""

    tier: Tier
    model: str
    provider: str
    refusals: list[dict[str, Any]] = field(default_factory=list)

    def next_body(self, body: dict[str, Any], error: ProviderError) -> dict[str, Any] | None:
        """`body` at the fallback tier when `error` refused the tier for capacity (once);
        None: the error stands."""
        if self.refusals or body.get("service_tier") != self.tier.tier:
            return None
        if not (isinstance(error, RateLimitError) and error.for_capacity):
            return None
        self.refusals.append(
            {
                "model": self.model,
                "provider": self.provider,
                "service_tier": self.tier.tier,
                "fallback": self.tier.fallback,
                "error": error.to_dict(),
            }
        )
        return {**body, "service_tier": self.tier.fallback}

    def charged(self, usage: Usage) -> tuple[Usage, list[dict[str, Any]]]:
        """The answer's usage with the refusals before it counted as requests billed at
        nothing, and the refusals (the response's `attempts`)."""
        if not self.refusals:
            return usage, []
        refused = len(self.refusals)
        if usage.cost is not None:
            usage = usage + Usage(requests=refused, cost=Cost())
        else:
            usage = usage.model_copy(update={"requests": usage.requests + refused})
        return usage, list(self.refusals)


def tier_fallback(options: ModelOptions, model: str, provider: str) -> TierFallback | None:
    """The fallback of a request's tier (its options filled from the model's settings),
    if it has one."""
    tier = options.service_tier
    if isinstance(tier, Tier) and tier.fallback is not None:
        return TierFallback(tier, model, provider)
    return None

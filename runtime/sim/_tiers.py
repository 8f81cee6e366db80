"""Service tiers as the providers serve them: the tier a request asks for, the one its
reply names, flex slower and priority faster, and flex refused for capacity.

OpenAI (Chat Completions, Responses): `service_tier` "auto" | "default" | "flex" |
"priority" (and "scale", "fast", which the SDK declares); the reply's `service_tier` is
the tier used ("auto" is served at "default"). A flex request the provider has no
capacity for is answered 429 with the code `resource_unavailable`, not billed.
Anthropic: `service_tier` "auto" | "standard_only"; the reply's `usage.service_tier` is
"standard", "priority" (an organisation with priority capacity, asking "auto") or
"batch" (a Message Batches line).
Gemini: `serviceTier` "flex" | "standard" | "priority" (Vertex AI: also the header
`X-Vertex-AI-LLM-Shared-Request-Type`); the reply names the tier served in the header
`x-gemini-service-tier` (Vertex AI: `usageMetadata.trafficType`).
Priority past its limit is served at standard without an error; flex without capacity
is shed with 503 UNAVAILABLE.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ._types import ParsedRequest, Wire, WireError

__all__ = ["ServiceTiers", "TierDesk", "requested_tier"]

_OPENAI_TIERS = ("auto", "default", "flex", "priority", "scale", "fast")
_ANTHROPIC_TIERS = ("auto", "standard_only")
CAPACITY_MESSAGE = (
    "Resource Unavailable: there is not enough flex capacity to serve this request now. "
    'Retry later, or send it with service_tier="default".'
)


@dataclass(frozen=True)
class ServiceTiers:
    """How the simulator serves tiers. `flex_latency` / `priority_latency`: what a reply
    at that tier takes of the configured latency (time to first byte and per token).
    `flex_refusal_rate`: the share of flex requests refused for capacity (429
    `resource_unavailable`), drawn from `seed`. `anthropic_priority`: the organisation
    has Anthropic priority capacity (a request asking "auto" is served at "priority").
    `priority_downgrade_rate`: the share of Gemini priority requests served at standard
    (past the priority limit: Gemini downgrades silently), drawn from `seed`."""

    flex_latency: float = 3.0
    priority_latency: float = 0.5
    flex_refusal_rate: float = 0.0
    anthropic_priority: bool = False
    priority_downgrade_rate: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for rate in (self.flex_refusal_rate, self.priority_downgrade_rate):
            if not 0.0 <= rate <= 1.0:
                raise ValueError(
                    "flex_refusal_rate and priority_downgrade_rate must be within [0, 1]"
                )
        if self.flex_latency < 0 or self.priority_latency < 0:
            raise ValueError("a tier's latency multiplier must be at least 0")


def requested_tier(body: dict[str, object], anthropic: bool) -> str | None:
    """The tier a request body asks for (WireError: one the provider does not know)."""
    tier = body.get("service_tier")
    if tier is None:
        return None
    known = _ANTHROPIC_TIERS if anthropic else _OPENAI_TIERS
    if tier not in known:
        choices = ", ".join(repr(t) for t in known)
        raise WireError(
            f"Invalid value for 'service_tier': {tier!r}. Expected one of {choices}.",
            param="service_tier",
            code="invalid_value",
        )
    return str(tier)


@dataclass
class TierDesk:
    """Serves each request a tier (one per simulator)."""

    tiers: ServiceTiers
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.tiers.seed)

    def reset(self) -> None:
        self._rng.seed(self.tiers.seed)

    def admit(self, wire: Wire, req: ParsedRequest, request_id: str) -> bytes | None:
        """Set the tier `req` is served at; the 429 body when flex has no capacity."""
        asked = req.service_tier
        if req.api == "anthropic":
            priority = asked == "auto" and self.tiers.anthropic_priority
            req.served_tier = "priority" if priority else "standard"
            return None
        if req.api == "gemini":
            return self._gemini(wire, req, request_id)
        req.served_tier = "default" if asked in (None, "auto") else asked
        rate = self.tiers.flex_refusal_rate
        if asked == "flex" and rate > 0 and self._rng.random() < rate:
            return wire.error(
                429, CAPACITY_MESSAGE, request_id=request_id, code="resource_unavailable"
            )
        return None

    def _gemini(self, wire: Wire, req: ParsedRequest, request_id: str) -> bytes | None:
        asked = req.service_tier
        req.served_tier = asked or "standard"
        downgrade = self.tiers.priority_downgrade_rate
        if asked == "priority" and downgrade > 0 and self._rng.random() < downgrade:
            req.served_tier = "standard"
        rate = self.tiers.flex_refusal_rate
        if asked == "flex" and rate > 0 and self._rng.random() < rate:
            message = (
                "This model is currently experiencing high demand for the flex tier. Spikes "
                "in demand are usually temporary. Please try again later."
            )
            return wire.error(503, message, request_id=request_id)
        return None

    def latency(self, req: ParsedRequest) -> float:
        """What the reply at `req`'s tier takes of the configured latency."""
        if req.served_tier == "flex":
            return self.tiers.flex_latency
        if req.served_tier == "priority":
            return self.tiers.priority_latency
        return 1.0

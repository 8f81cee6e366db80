"""Service tiers and prompt-cache keys: what the OpenAI and Anthropic adapters take
beyond `ModelSettings` (a flex request's fallback when the provider has no capacity is
a step of the access layer: `raygent.seams.access`).

OpenAI's `service_tier` is "auto", "default", "flex" or "priority"; the reply says which
tier served it. Anthropic's is "auto" or "standard_only"; its reply says `standard`,
`priority` or `batch` in `usage.service_tier`. A reply is priced at the tier it names
(`raygent.pricing`).
"""

from __future__ import annotations

from typing import Any, Literal

from ._http import ModelSettings
from .contract import ModelOptions, Tier

__all__ = [
    "AnthropicSettings",
    "OpenAISettings",
    "body_tier",
    "openai_fields",
    "openai_options",
    "served_tier",
    "with_defaults",
]

OpenAITier = Literal["auto", "default", "flex", "priority"]
AnthropicTier = Literal["auto", "standard_only"]
CacheRetention = Literal["in_memory", "24h"]

_NO_OPTIONS = ModelOptions()


class OpenAISettings(ModelSettings, total=False):
    """`ModelSettings`, and what an OpenAI model (Chat Completions, Responses) sends with
    every request unless a call's `ModelOptions` says otherwise: `service_tier` (a tier's
    name, or `raygent.Tier("flex", fallback="default")`), `prompt_cache_key` (a string;
    "session" or "agent": one derived per session, or per agent, by the agent's runs) and
    `prompt_cache_retention` ("in_memory" or "24h")."""

    service_tier: OpenAITier | Tier | None
    prompt_cache_key: str | None
    prompt_cache_retention: CacheRetention | None


class AnthropicSettings(ModelSettings, total=False):
    """`ModelSettings`, and `service_tier` ("auto": priority capacity when the
    organisation has it, else standard; "standard_only")."""

    service_tier: AnthropicTier | Tier | None


def body_tier(options: ModelOptions, default: str | Tier | None) -> str | None:
    """The tier a request asks for: the call's, else the model's (a `Tier`'s first)."""
    tier = options.service_tier if options.service_tier is not None else default
    return tier.tier if isinstance(tier, Tier) else tier


# The prompt-cache keys an agent derives (per session, per agent): a model given one
# outside an agent's run sends none.
DERIVED_KEYS = ("session", "agent")


def with_defaults(
    options: ModelOptions,
    service_tier: str | Tier | None,
    cache_key: str | None = None,
    retention: str | None = None,
) -> ModelOptions:
    """`options` with the model's settings where the call set none (copied only when a
    setting fills a gap: most requests pass through untouched)."""
    update: dict[str, Any] = {}
    if options.service_tier is None and service_tier is not None:
        update["service_tier"] = service_tier
    if options.prompt_cache_key is None and cache_key is not None:
        update["prompt_cache_key"] = cache_key
    if options.prompt_cache_retention is None and retention is not None:
        update["prompt_cache_retention"] = retention
    return options.model_copy(update=update) if update else options


def openai_options(model: Any, options: ModelOptions | None) -> ModelOptions:
    """A call's options, an OpenAI model's settings (`service_tier`, `prompt_cache_key`,
    `prompt_cache_retention`) filling what it left unset."""
    return with_defaults(
        options or _NO_OPTIONS,
        model.service_tier,
        model.prompt_cache_key,
        model.prompt_cache_retention,
    )


def openai_fields(options: ModelOptions) -> dict[str, Any]:
    """The tier and prompt-cache fields of an OpenAI request body (Chat Completions and
    Responses name them alike)."""
    fields: dict[str, Any] = {}
    tier = body_tier(options, None)
    if tier is not None:
        fields["service_tier"] = tier
    key = options.prompt_cache_key
    if key is not None and key not in DERIVED_KEYS:
        fields["prompt_cache_key"] = key
    if options.prompt_cache_retention is not None:
        fields["prompt_cache_retention"] = options.prompt_cache_retention
    return fields


def served_tier(value: object) -> str | None:
    """The tier a reply names (a string), else None."""
    return value if isinstance(value, str) and value else None

"""Helpers of the service-tier suite: models on the simulator at declared prices whose
tiers cost apart (flex half, priority double), and what a request's body asked for."""

from __future__ import annotations

from typing import Any

import raygent
from raygent import Pricing
from raygent.models._http import HTTPModel
from raygent.sim import Reply, Rule, Simulator

KEY = "sk-tiers-test-0001"
# Declared prices (USD per million tokens), big enough that a request costs cents.
PRICING = Pricing(
    input_per_mtok=1000.0,
    output_per_mtok=3000.0,
    cached_input_per_mtok=100.0,
    flex_multiplier=0.5,
    priority_multiplier=2.0,
)
ANSWER = "a" * 80


def model(sim: Simulator, kind: str = "openai", **settings: Any) -> HTTPModel:
    """A priced model of `kind` ("openai", "openai_responses", "anthropic"; "gemini" on
    the Gemini API, "vertex" on Vertex AI) on `sim`."""
    settings.setdefault("pricing", PRICING)
    if kind == "gemini":
        return raygent.GeminiModel(
            "gemini-sim", base_url=sim.gemini_base_url, api_key=KEY, **settings
        )
    if kind == "vertex":
        from google.oauth2.credentials import Credentials

        return raygent.GeminiModel(
            "gemini-sim",
            vertex=True,
            project="sim-project",
            credentials=Credentials(token=KEY),
            base_url=sim.gemini_base_url,
            **settings,
        )
    if kind == "anthropic":
        return raygent.AnthropicModel(
            "claude-sim", base_url=sim.anthropic_base_url, api_key=KEY, **settings
        )
    cls = raygent.OpenAIResponsesModel if kind == "openai_responses" else raygent.OpenAIModel
    return cls("sim-gpt", base_url=sim.openai_base_url, api_key=KEY, **settings)


def rules() -> list[Rule]:
    return [Rule(reply=Reply(text=ANSWER))]


def asked(sim: Simulator, field: str = "service_tier") -> list[Any]:
    """What each model request the simulator received asked for in `field`, in order."""
    return [
        (r.body or {}).get("serviceTier" if "Content" in r.path else field)
        for r in sim.requests
        if r.path.endswith(("/chat/completions", "/responses", "/messages"))
        or r.path.endswith((":generateContent", ":streamGenerateContent"))
    ]

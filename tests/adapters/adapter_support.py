"""Helpers for adapter tests: a model of each provider aimed at a simulator."""

from __future__ import annotations

from typing import Any

from raygent import AnthropicModel, GeminiModel, OpenAIModel, OpenAIResponsesModel, Pricing
from raygent.models._http import HTTPModel

PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=2.0, cached_input_per_mtok=0.5)
KEY = "sk-test-key-000000"


def make_model(provider: str, sim: Any, **kwargs: Any) -> HTTPModel:
    kwargs.setdefault("api_key", KEY)
    if provider == "openai":
        return OpenAIModel("sim-gpt", base_url=sim.openai_base_url, **kwargs)
    if provider == "openai_responses":
        return OpenAIResponsesModel("sim-gpt", base_url=sim.openai_base_url, **kwargs)
    if provider == "gemini":
        return GeminiModel("sim-gemini", base_url=sim.gemini_base_url, **kwargs)
    return AnthropicModel("sim-claude", base_url=sim.anthropic_base_url, **kwargs)

"""Helpers for the rate tests: a model of each provider aimed at a simulator."""

from __future__ import annotations

from typing import Any

from raygent import AnthropicModel, OpenAIModel, OpenAIResponsesModel
from raygent.models._http import HTTPModel

KEY = "sk-test-key-rates-0000"


def make_model(provider: str, sim: Any, **kwargs: Any) -> HTTPModel:
    kwargs.setdefault("api_key", KEY)
    if provider == "openai":
        return OpenAIModel("sim-gpt", base_url=sim.openai_base_url, **kwargs)
    if provider == "openai_responses":
        return OpenAIResponsesModel("sim-gpt", base_url=sim.openai_base_url, **kwargs)
    return AnthropicModel("sim-claude", base_url=sim.anthropic_base_url, **kwargs)

"""Helpers for adapter tests: a model of each provider aimed at a simulator."""

from __future__ import annotations

from typing import Any

from raygent import (
    AnthropicModel,
    BedrockModel,
    GeminiModel,
    OpenAIModel,
    OpenAIResponsesModel,
    Pricing,
)
from raygent.models._http import HTTPModel
from raygent.sim._bedrock_auth import TEST_CREDENTIALS

BEDROCK_MODEL = "us.anthropic.claude-haiku-4-5-20251001-v1:0"

PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=2.0, cached_input_per_mtok=0.5)
KEY = "sk-test-key-000000"


def make_model(provider: str, sim: Any, **kwargs: Any) -> HTTPModel:
    if provider == "bedrock":
        return bedrock_model(sim, **kwargs)
    kwargs.setdefault("api_key", KEY)
    if provider == "openai":
        return OpenAIModel("sim-gpt", base_url=sim.openai_base_url, **kwargs)
    if provider == "openai_responses":
        return OpenAIResponsesModel("sim-gpt", base_url=sim.openai_base_url, **kwargs)
    if provider == "gemini":
        return GeminiModel("sim-gemini", base_url=sim.gemini_base_url, **kwargs)
    return AnthropicModel("sim-claude", base_url=sim.anthropic_base_url, **kwargs)


def bedrock_model(sim: Any, *, model_id: str = BEDROCK_MODEL, **kwargs: Any) -> BedrockModel:
    """A Bedrock model on `sim`: signed with the simulator's test credentials (it
    verifies the signature), or, given `api_key=`, with that Bedrock API key (bearer)."""
    if "api_key" not in kwargs:
        kwargs.setdefault("access_key", TEST_CREDENTIALS.access_key)
        kwargs.setdefault("secret_key", TEST_CREDENTIALS.secret_key)
    return BedrockModel(model_id, base_url=sim.url, region="us-east-1", **kwargs)

from __future__ import annotations

import pytest


# "openai_responses": OpenAIResponsesModel (the Responses API), provider "openai" too;
# "bedrock": BedrockModel (Converse), its requests signed; "gemini": GeminiModel.
@pytest.fixture(params=["openai", "openai_responses", "anthropic", "gemini", "bedrock"])
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)

from __future__ import annotations

import pytest


# "openai_responses": OpenAIResponsesModel (the Responses API), provider "openai" too;
# "bedrock": BedrockModel (Converse), its requests signed.
@pytest.fixture(params=["openai", "openai_responses", "anthropic", "bedrock"])
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)

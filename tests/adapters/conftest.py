from __future__ import annotations

import pytest


# "openai_responses": OpenAIResponsesModel (the Responses API), provider "openai" too.
@pytest.fixture(params=["openai", "openai_responses", "anthropic", "gemini"])
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)

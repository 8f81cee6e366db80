from __future__ import annotations

import pytest


@pytest.fixture(params=["openai", "anthropic"])
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)

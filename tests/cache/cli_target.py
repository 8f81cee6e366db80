"""An agent for the CLI test: `tests.cache.cli_target:bot`, on the simulator whose URL
the test gives in RAYGENT_CACHE_TEST_SIM."""

from __future__ import annotations

import os

import raygent
from raygent import OpenAIModel

bot = raygent.agent(
    model=OpenAIModel(
        "sim-gpt", base_url=os.environ["RAYGENT_CACHE_TEST_SIM"], api_key="sk-cache-test-0000"
    )
)

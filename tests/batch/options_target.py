"""Targets for the CLI's option tests: `tests.batch.options_target:bot`, an agent on the
simulator whose OpenAI base URL the test gives in RAYGENT_OPTIONS_TEST_SIM, and `plain`,
a plain callable."""

from __future__ import annotations

import os

import raygent

bot = raygent.agent(
    model=raygent.OpenAIModel(
        "sim-gpt",
        base_url=os.environ.get("RAYGENT_OPTIONS_TEST_SIM", "http://127.0.0.1:9/v1"),
        api_key="sk-options-test-0000",
    )
)


async def plain(item: object) -> object:
    return item

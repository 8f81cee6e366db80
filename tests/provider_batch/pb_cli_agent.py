"""An agent for the CLI test: `tests.provider_batch.pb_cli_agent:bot`, on the simulator
at $RAYGENT_TEST_SIM_URL (the OpenAI base URL)."""

from __future__ import annotations

import os

import raygent

bot = raygent.agent(
    model=raygent.OpenAIModel(
        "gpt-4o-mini",
        base_url=os.environ["RAYGENT_TEST_SIM_URL"],
        api_key="sk-test",
        pricing=raygent.Pricing(input_per_mtok=1.0, output_per_mtok=2.0),
    )
)

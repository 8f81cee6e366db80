"""Helpers for the budget and estimate tests: a priced model on the simulator, uniform
items, and the cost the provider (the simulator) was really paid."""

from __future__ import annotations

import os
from typing import Any

import raygent
from raygent import OpenAIModel, Pricing
from raygent.sim import Reply, Rule, Simulator

# Declared prices (USD per million tokens): big, so that a few requests cost cents.
PRICING = Pricing(input_per_mtok=1000.0, output_per_mtok=3000.0)
ANSWER = "a" * 80  # 20 output tokens, whatever the question
MAX_TOKENS = 40


def priced_model(sim: Simulator, **kwargs: Any) -> OpenAIModel:
    kwargs.setdefault("api_key", "sk-spend-test")
    kwargs.setdefault("pricing", PRICING)
    return OpenAIModel("sim-gpt", base_url=sim.openai_base_url, **kwargs)


def uniform_rules() -> list[Rule]:
    return [Rule(reply=Reply(text=ANSWER))]


def questions(count: int) -> list[dict[str, Any]]:
    """Items of one size (a fixed-width question): every request costs the same."""
    return [{"input": f"question number {i:05d}", "key": f"k{i:05d}"} for i in range(count)]


def paid(sim: Simulator, per_request: float) -> float:
    """What the provider was paid: every answered request, at the same cost."""
    return sim.stats().by_status.get(200, 0) * per_request


# Prices at which a small job costs under a cent (what the CLI must still print).
CHEAP = Pricing(input_per_mtok=1.0, output_per_mtok=3.0)


def __getattr__(name: str) -> Any:
    # `raygent batch spend_support:cli_agent ...`: an agent on the simulator the test
    # started (its URL in SPEND_SIM_URL); `cheap_cli_agent`, the same at `CHEAP` prices.
    if name in ("cli_agent", "cheap_cli_agent"):
        model = OpenAIModel(
            "sim-gpt",
            base_url=os.environ["SPEND_SIM_URL"],
            api_key="sk-spend-test",
            pricing=PRICING if name == "cli_agent" else CHEAP,
        )
        return raygent.agent(model=model, model_options={"max_tokens": MAX_TOKENS})
    raise AttributeError(name)

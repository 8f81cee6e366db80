"""What the provider-batch tests share: the script (a tool round: two trips an item),
models of the three batch APIs on a simulator, and how to count what was sent."""

from __future__ import annotations

from typing import Any

import raygent
from raygent import AnthropicModel, OpenAIModel, OpenAIResponsesModel, Pricing
from raygent.sim import Match, Reply, Rule, SimStats, ToolCallReply

APIS = ("chat", "responses", "anthropic")
PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=2.0)
# Gathered long enough for 2,000 runs' trips to make one batch; QUICK for a few runs.
FAST = raygent.ProviderBatch(gather_seconds=1.0, poll_seconds=0.05)
QUICK = raygent.ProviderBatch(gather_seconds=0.1, poll_seconds=0.02)

TOOL_ROUND = [
    Rule(match=Match(after_tool_result=True), reply=Reply(text="answered")),
    Rule(reply=Reply(tool_calls=[ToolCallReply("lookup", {"q": "x"})])),
]


@raygent.tool
def lookup(q: str) -> str:
    """Look a question up."""
    return "found " + q


def model_for(api: str, sim: Any, **settings: Any) -> Any:
    settings.setdefault("pricing", PRICING)
    settings.setdefault("api_key", "sk-test")
    if api == "chat":
        return OpenAIModel("gpt-4o-mini", base_url=sim.openai_base_url, **settings)
    if api == "responses":
        return OpenAIResponsesModel("gpt-4o-mini", base_url=sim.openai_base_url, **settings)
    return AnthropicModel("claude-sonnet-4-5", base_url=sim.anthropic_base_url, **settings)


def online_requests(stats: SimStats) -> int:
    """Requests to the online endpoints (the batch APIs' own calls left out)."""
    return stats.requests - stats.batch_calls

"""Gemini in the combination matrix (issue 46.6): online and by provider batch, with the
response cache, a binding budget, sessions, and fallbacks from Gemini to OpenAI and to
Anthropic and from each of them to Gemini, on both backends. The same guarantees as
every cell of the matrix (`test_combinations`): every item once in the sink, the
report's cost the sum of its trips', the spend within the budget, sessions alternating
user and assistant, each trip gone the cell's way; and with the cache, a second job
answered by it alone."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from combo_support import DOWN, KEY, MAX_TOKENS, PRICING, PROVIDER_BATCH, UP, Cell, lookup
from test_combinations import Job, _check_job, _check_sessions

import raygent
from raygent import AnthropicModel, GeminiModel, Memory, OpenAIModel, ResponseCache
from raygent.sim import Simulator
from raygent.stores import SQLiteStore


@dataclass(frozen=True)
class GeminiCell:
    cell: Cell
    chain: tuple[str, ...]  # the providers of the models, the first down if two

    @property
    def id(self) -> str:
        return f"{self.cell.id}-{'-to-'.join(self.chain)}"


CELLS = [
    GeminiCell(Cell("online", True, False, None, False), ("gemini",)),
    GeminiCell(Cell("batch", True, False, None, False), ("gemini",)),
    GeminiCell(Cell("online", True, False, None, True), ("gemini", "openai")),
    GeminiCell(Cell("online", True, False, None, True), ("openai", "gemini")),
    GeminiCell(Cell("batch", True, False, None, True), ("openai", "gemini")),
    GeminiCell(Cell("online", False, True, None, True), ("gemini", "anthropic")),
    GeminiCell(Cell("online", False, True, None, True), ("anthropic", "gemini")),
    GeminiCell(Cell("online", False, True, "turn", False), ("gemini",)),
    GeminiCell(Cell("batch", False, True, "message", False), ("gemini",)),
]


def _model(provider: str, name: str, sim: Simulator) -> Any:
    if provider == "gemini":
        return GeminiModel(name, base_url=sim.gemini_base_url, api_key=KEY, pricing=PRICING)
    if provider == "anthropic":
        return AnthropicModel(name, base_url=sim.anthropic_base_url, api_key=KEY, pricing=PRICING)
    return OpenAIModel(name, base_url=sim.openai_base_url, api_key=KEY, pricing=PRICING)


@pytest.mark.parametrize("gcell", CELLS, ids=lambda c: c.id)
async def test_every_guarantee_holds_with_gemini(
    gcell: GeminiCell, backend_kind: str, sim: Simulator, tmp_path: Path
) -> None:
    cell = gcell.cell
    if len(gcell.chain) == 2:
        first, second = gcell.chain
        model: Any = raygent.fallback_model([_model(first, DOWN, sim), _model(second, UP, sim)])
    else:
        model = _model(gcell.chain[0], UP, sim)
    stores: list[SQLiteStore] = []
    memory = None
    if cell.session is not None:
        stores.append(SQLiteStore(tmp_path / "sessions.db"))
        memory = Memory(stores[-1], cell.session)  # type: ignore[arg-type]
    agent = raygent.agent(
        model=model, tools=[lookup], memory=memory, model_options={"max_tokens": MAX_TOKENS}
    )
    options: dict[str, Any] = {"progress": False}
    if cell.mode == "batch":
        options["provider_batch"] = PROVIDER_BATCH
    if cell.cache:
        stores.append(SQLiteStore(tmp_path / "cache.db"))
        options["cache"] = ResponseCache(stores[-1])
    from combo_support import Setup, items, job_budget

    ready = Setup(agent, stores[0] if cell.session is not None else None, options, stores)
    try:
        jobs: list[Job] = []
        for name in ("first", "second") if cell.cache else ("first",):
            sink = tmp_path / f"{name}.jsonl"
            ended: list[raygent.BatchItem] = []
            sim.reset()
            result = await raygent.batch(
                agent, items(cell), sink=sink, on_item=ended.append, **options, **job_budget(cell)
            )
            job = Job(result, ended, sim.stats(), {})
            _check_job(cell, job, sink, first_job=name == "first")
            jobs.append(job)
            await _check_sessions(cell, ready, jobs)
        if cell.cache:  # the second job: every trip a hit, nothing sent
            second = jobs[1]
            assert second.stats.requests == 0, second.stats
            assert all(t.cache == "hit" for i in second.items for t in i.result.report.trips)
    finally:
        await ready.close()

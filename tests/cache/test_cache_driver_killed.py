"""A batch with a response cache, its driver SIGKILLed mid-job, resumed from its sink:
the resume pays only for what the first run had not received (issue #30).

The driver is a process of its own (this test kills it); the simulator runs here and
counts every request over both runs; the cache is a SQLite file both runs share. Each
item is two trips (a tool call, then the answer). A reply the first run received is in
the cache (it is stored as it arrives): the resume asks for it again from the cache, not
the provider, whether its item reached the sink or was cut off between its trips. So the
resume sends exactly the requests whose replies the cache does not hold: 2 x items minus
the cache's rows after the kill.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest
from shared_support import driver_env, kill_when, run_to_end, sunk

from raygent.sim import Latency, Match, Reply, Rule, ToolCallReply, serve

ITEMS, CONCURRENCY = 400, 32
DRIVER = f"""
import asyncio, sys
import raygent
from raygent.models import OpenAIModel
from raygent.stores import SQLiteStore

@raygent.tool
def lookup(q: str) -> str:
    '''Look a question up.'''
    return "found " + q

async def main(url, sink, cache, resume):
    model = OpenAIModel("sim-gpt", base_url=url, api_key="sk-test", max_concurrency=64)
    bot = raygent.agent(model=model, tools=[lookup])
    items = [{{"input": f"q{{i}}", "key": i}} for i in range({ITEMS})]
    result = await raygent.batch(
        bot, items, concurrency={CONCURRENCY}, sink=sink, resume=resume, progress=False,
        cache=raygent.ResponseCache(SQLiteStore(cache)),
    )
    print("done", result.report.succeeded, result.report.skipped, flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "resume"))
"""
RULES = [
    Rule(
        match=Match(after_tool_result=False),
        reply=Reply(tool_calls=[ToolCallReply("lookup", {"q": "x"})]),
    ),
    Rule(match=Match(after_tool_result=True), reply=Reply(text="answered")),
]


def _cached(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM raygent_cache").fetchone()[0])


@pytest.mark.timeout(300)
@pytest.mark.local_only("the cache's part: a driver process on the local backend")
async def test_a_resume_after_the_driver_was_killed_pays_only_for_replies_not_received(
    tmp_path: Path,
) -> None:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    sink, cache = tmp_path / "out.jsonl", tmp_path / "cache.db"
    with serve(RULES, latency=Latency(fixed_ms=2, jitter_ms=2)) as sim:
        command = [sys.executable, str(script), sim.openai_base_url, str(sink), str(cache)]
        env = driver_env("local")
        await kill_when([*command, "new"], env, lambda: len(sunk(sink)) >= ITEMS // 3)
        first, received = sim.stats().requests, _cached(cache)
        assert len(sunk(sink)) < ITEMS  # killed mid-job
        await run_to_end([*command, "resume"], env, timeout=240)
        second = sim.stats().requests - first
    keys = sorted(json.loads(line)["key"] for line in sunk(sink))
    assert keys == list(range(ITEMS))  # every item once
    # The resume asked the provider for exactly what the cache did not hold...
    assert second == 2 * ITEMS - received, (first, received, second)
    # ...and what was paid twice is only what was in flight when the driver died.
    assert 0 <= first - received <= CONCURRENCY, (first, received)
    assert _cached(cache) == 2 * ITEMS

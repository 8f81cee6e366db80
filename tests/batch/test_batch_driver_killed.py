"""A driver SIGKILLed mid-job, then resumed from its sink (`resume=True`, no `durable=`):
every item once in the sink, and the resume pays again at most for the runs that were in
flight when the driver died (issue #27.3): a finished result reaches the sink, written
and flushed to the OS, within a bounded window, so results a driver had received are
never paid twice.

The driver is a process of its own (this test kills it); the simulator runs here and
counts every request over both runs. Each item is two trips (a tool call, then the
answer), so a run in flight when the driver dies costs at most its two requests again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from shared_support import driver_env, kill_when, run_to_end, sunk

from raygent.sim import Latency, Match, Reply, Rule, ToolCallReply, serve

ITEMS, CONCURRENCY = 300, 32
DRIVER = f"""
import asyncio, sys
import raygent
from raygent.models import OpenAIModel

@raygent.tool
def lookup(q: str) -> str:
    '''Look a question up.'''
    return "found " + q

async def main(url, sink, resume):
    model = OpenAIModel("sim-gpt", base_url=url, api_key="sk-test", max_concurrency=64)
    bot = raygent.agent(model=model, tools=[lookup])
    items = [{{"input": f"q{{i}}", "key": i}} for i in range({ITEMS})]
    result = await raygent.batch(
        bot, items, concurrency={CONCURRENCY}, sink=sink, resume=resume, progress=False
    )
    print("done", result.report.succeeded, result.report.skipped, flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] == "resume"))
"""
RULES = [
    Rule(
        match=Match(after_tool_result=False),
        reply=Reply(tool_calls=[ToolCallReply("lookup", {"q": "x"})]),
    ),
    Rule(match=Match(after_tool_result=True), reply=Reply(text="answered")),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", ["local", "ray"])
async def test_a_resume_after_the_driver_was_killed_pays_again_only_for_runs_in_flight(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "ray":
        request.getfixturevalue("ray_session")
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    sink = tmp_path / "out.jsonl"
    with serve(RULES, latency=Latency(fixed_ms=2, jitter_ms=2)) as sim:
        command = [sys.executable, str(script), sim.openai_base_url, str(sink)]
        env = driver_env(backend)
        await kill_when([*command, "new"], env, lambda: len(sunk(sink)) >= ITEMS // 3)
        written = len(sunk(sink))
        await run_to_end([*command, "resume"], env)
        paid = sim.stats().requests
    keys = sorted(json.loads(line)["key"] for line in sunk(sink))
    assert keys == list(range(ITEMS))  # every item once
    again = paid - 2 * ITEMS
    print(f"\n{backend}: {written} items sunk before the kill, {again} requests paid twice")
    # Two trips an item; on Ray a runner also holds a quarter more jobs than its slots
    # (started only as slots free), so at most 1.25x the runs in flight are lost there.
    held = CONCURRENCY if backend == "local" else CONCURRENCY + CONCURRENCY // 4
    assert 0 <= again <= 2 * held, again

"""Durable runs on the Ray backend: a batch runner SIGKILLed mid-batch hands its items
on, and each resumes from its snapshot on another runner (trip 1 and its tool are not
done again)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest
from ray_support import backend, sim_model

import raygent
from raygent import Durable
from raygent.sim import Match, Reply, Rule, ToolCallReply, serve
from raygent.stores import SQLiteStore

pytestmark = pytest.mark.usefixtures("ray_session")

ITEMS = 16


def where_tool(marks: Path) -> raygent.Tool[..., str]:
    @raygent.tool(name="where", inline=True)  # inline: it runs in the runner's process
    def where(item: str) -> str:
        """Say where an item runs."""
        with marks.open("a") as f:
            f.write(f"{item} {os.getpid()}\n")
        return f"{item} ran"

    return where


async def test_a_killed_runners_items_resume_from_their_snapshots_elsewhere(
    tmp_path: Path,
) -> None:
    marks, sink = tmp_path / "marks", tmp_path / "out.jsonl"
    script = [
        Rule(
            match=Match(after_tool_result=False),
            reply=Reply(tool_calls=[ToolCallReply("where", {"item": "it"})]),
        ),
        # Trip 2 takes a while: the runner is killed while every item waits on it.
        Rule(match=Match(after_tool_result=True), reply=Reply(text="Done.", latency_ms=3000)),
    ]
    store = SQLiteStore(tmp_path / "runs.db")
    async with serve(script) as sim:
        bot = raygent.agent(model=sim_model(sim), tools=[where_tool(marks)], backend=backend())
        running = asyncio.ensure_future(
            raygent.batch(
                bot,
                [f"item {i}" for i in range(ITEMS)],
                concurrency=ITEMS,
                runners=2,
                sink=sink,
                durable=Durable(store=store),
                progress=False,
            )
        )
        # Every item's trip 2 has arrived: every tool round is settled and written.
        await sim.wait_until(lambda s: s.requests == 2 * ITEMS, timeout=60)
        # The tool is inline: the pid it wrote is a runner's. The last to write one: its
        # trip 2s went last, so they are the surest to be still waiting (a loaded machine
        # spreads the arrivals; the first runner's could be answered before the kill).
        victim = int(marks.read_text().splitlines()[-1].split()[1])
        os.kill(victim, signal.SIGKILL)
        result = await asyncio.wait_for(running, timeout=120)
        bodies = [r.body for r in sim.requests]
    await store.aclose()
    assert result.ok, result.report
    # No tool ran twice: the killed runner's rounds were settled and written.
    assert len(marks.read_text().splitlines()) == ITEMS
    rows = [json.loads(line) for line in sink.read_text().splitlines()]
    moved = sum(1 for r in rows if r["attempts"] >= 2)  # the killed runner's items
    assert moved > 0
    firsts = [b for b in bodies if b is not None and "tool" not in json.dumps(b["messages"])]
    assert len(firsts) == ITEMS  # no trip 1 was sent again
    # Only the killed runner's trip 2s again, at most: under load, some of its items may
    # have finished there before the kill without the driver hearing of it (their
    # resume finds them completed and sends nothing).
    assert 2 * ITEMS <= len(bodies) <= 2 * ITEMS + moved
    assert sorted(r["key"] for r in rows) == list(range(ITEMS))
    assert {r["status"] for r in rows} == {"completed"}

"""provider_batch= on Ray with the batch runners SIGKILLed while their runs send their
second trips: the items run again on new runners under the same line ids (an attempt
lost with its runner is not a retry), so what was answered is read again from the
driver's pool and what is out is waited for: no line is sent twice."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from pb_support import FAST, TOOL_ROUND, lookup, model_for, online_requests
from shared_support import ray_pids, until

import raygent
from raygent.sim import serve

ITEMS = 300


@pytest.mark.timeout(300)
@pytest.mark.by_api_and_backend([("ray", "chat")])
async def test_runners_killed_while_their_lines_are_out_send_no_line_twice(
    backend_kind: str, api: str
) -> None:
    killed: list[int] = []
    async with serve(TOOL_ROUND, batch_seconds=0.5) as sim:
        bot = raygent.agent(model=model_for(api, sim), tools=[lookup])

        def downloaded() -> bool:  # the first trips' batch ended and was read
            return any(r.method == "GET" and r.path.endswith("/content") for r in sim.requests)

        async def kill_the_runners() -> None:
            # Both of the batch's runners (and any kept idle from an earlier batch): each
            # holds runs whose first trip was answered and whose second is being sent.
            await until(downloaded)
            killed.extend(ray_pids("Runner"))
            for pid in killed:
                os.kill(pid, signal.SIGKILL)

        killer = asyncio.ensure_future(kill_the_runners())
        items = [{"input": f"q{i}", "key": i} for i in range(ITEMS)]
        result = await raygent.batch(bot, items, provider_batch=FAST, runners=2, progress=False)
        await killer
        stats = sim.stats()
    assert killed
    assert result.report.succeeded == ITEMS, result.report.errors
    assert sorted(item.key for item in result.items) == list(range(ITEMS))
    assert stats.batch_lines == 2 * ITEMS  # no line sent twice
    assert online_requests(stats) == 0
    assert all(item.attempts == 2 for item in result.items)  # each ran again, once

"""provider_batch= on Ray with the batch runners SIGKILLed while their runs send their
second trips: the items run again on new runners under the same line ids (an attempt
lost with its runner is not a retry), so what was answered is read again from the
driver's pool and what is out is waited for: no line is sent twice. On OpenAI's batches,
the Gemini API's batch mode and Bedrock's model invocation jobs (issues #46, #47)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest
from pb_support import FAST, TOOL_ROUND, ledger_count, lookup, model_at, online_requests, places
from shared_support import ray_pids, until

import raygent
from raygent.sim import serve

ITEMS = 300  # two trips an item: batches of 300 lines (Bedrock's jobs take >= 100)


@pytest.mark.timeout(300)
@pytest.mark.by_api_and_backend([("ray", "chat"), ("ray", "gemini"), ("ray", "bedrock")])
async def test_runners_killed_while_their_lines_are_out_send_no_line_twice(
    backend_kind: str, api: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    s3: dict[str, str] = {}
    if api == "bedrock":  # its jobs' records in S3
        s3 = {"s3": request.getfixturevalue("moto_s3"), "bucket": request.getfixturevalue("bucket")}
    sink = tmp_path / "out.jsonl"
    ledger = tmp_path / "out.jsonl.provider-batches"
    killed: list[int] = []
    async with serve(TOOL_ROUND, batch_seconds=0.5, s3_endpoint_url=s3.get("s3")) as sim:
        bot = raygent.agent(model=model_at(api, places(sim, **s3)), tools=[lookup])

        async def kill_the_runners() -> None:
            # Once the first trips' batch ended and its results were read (the ledger
            # keeps them before they are handed out), both of the batch's runners (and
            # any kept idle from an earlier batch): each holds runs whose first trip was
            # answered and whose second is being sent.
            await until(lambda: ledger_count(ledger, "ended") >= 1)
            killed.extend(ray_pids("Runner"))
            for pid in killed:
                os.kill(pid, signal.SIGKILL)

        killer = asyncio.ensure_future(kill_the_runners())
        items = [{"input": f"q{i}", "key": i} for i in range(ITEMS)]
        result = await raygent.batch(
            bot, items, provider_batch=FAST, runners=2, sink=sink, progress=False
        )
        await killer
        stats = sim.stats()
    assert killed
    assert result.report.succeeded == ITEMS, result.report.errors
    rows = [json.loads(line) for line in sink.read_text().splitlines()]
    assert sorted(row["key"] for row in rows) == list(range(ITEMS))  # every item once
    assert stats.batch_lines == 2 * ITEMS  # no line sent twice
    assert online_requests(stats) == 0
    assert all(row["attempts"] == 2 for row in rows)  # each ran again, once

"""Provider batches are not cut by `concurrency` (issue 37, point 3), and what the bar
shows while a job waits for them (point 5); on both backends.

`concurrency` bounds the attempts working (tools, online trips); the items waiting for
their lines are bounded by `ProviderBatch.max_waiting` (default: one batch's lines).
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from pb_support import model_for
from shared_support import driver_env
from tqdm.notebook import tqdm as widget_bar

import raygent
import raygent._batch.progress as progress_module
from raygent._batch.provider.job import max_waiting
from raygent.sim import Match, Reply, Rule, ToolCallReply, serve

ROOT = Path(__file__).resolve().parents[2]
ITEMS = 300
# A trip's lines join its batch within a second of each other, even on a loaded machine.
QUICK = raygent.ProviderBatch(gather_seconds=1.0, poll_seconds=0.05)
REDIS_URL = "redis://127.0.0.1:6379/0"
# INCR the tools running now; keep the highest count seen.
_ENTER = """
local now = redis.call('INCR', KEYS[1])
if now > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], now) end
return now
"""


def checked_round(key: str) -> list[Rule]:
    """Two trips an item: a call of `checked` (counting under `key`), then the answer."""
    return [
        Rule(match=Match(after_tool_result=True), reply=Reply(text="answered")),
        Rule(reply=Reply(tool_calls=[ToolCallReply("checked", {"q": "x", "key": key})])),
    ]


@raygent.tool
async def checked(q: str, key: str) -> str:
    """Look a question up (counting, in Redis, the lookups running at once: the batch
    runners are other processes)."""
    client = aioredis.from_url(REDIS_URL)
    try:
        await client.eval(_ENTER, 2, f"{key}:now", f"{key}:peak")
        await asyncio.sleep(0.02)  # the tool's work: others start meanwhile
        await client.decr(f"{key}:now")
    finally:
        await client.aclose()
    return "found " + q


def _batch_creates(sim: Any) -> int:
    return sum(1 for r in sim.requests if r.method == "POST" and r.path == "/v1/batches")


async def test_300_items_at_concurrency_8_go_in_one_batch_per_trip_with_8_tools_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = f"rg-test-peak-{uuid.uuid4().hex}"
    async with serve(checked_round(key)) as sim:
        bot = raygent.agent(model=model_for("chat", sim), tools=[checked])
        with caplog.at_level(logging.WARNING):
            result = await raygent.batch(
                bot,
                [f"q{i}" for i in range(ITEMS)],
                concurrency=8,
                provider_batch=QUICK,
                progress=False,
            )
        stats, creates = sim.stats(), _batch_creates(sim)
    client = aioredis.from_url(REDIS_URL)
    try:
        peak = int(await client.get(f"{key}:peak") or 0)
        await client.delete(f"{key}:now", f"{key}:peak")
    finally:
        await client.aclose()
    report = result.report
    assert report.succeeded == ITEMS, report.errors
    summary = report.provider_batch
    assert summary is not None
    # Two trips an item: two batches of every item's line, one after the other.
    lines = [b.lines for b in summary.batches]
    assert creates == 2 and lines == [ITEMS, ITEMS], lines
    assert stats.batch_lines == 2 * ITEMS and stats.requests == stats.batch_calls
    # concurrency still bounds the tools: at most 8 ran at once, and they did overlap.
    assert 1 < peak <= 8, peak
    assert not [r for r in caplog.records if "provider_batch:" in r.getMessage()]


async def test_a_large_input_is_read_no_further_ahead_than_max_waiting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    waiting, items = 40, 160
    ahead: list[int] = []  # at each read: items read and not ended
    ended = 0

    def questions() -> Iterator[str]:  # a generator: its size is not known ahead
        for i in range(items):
            ahead.append(i + 1 - ended)
            yield f"q{i}"

    def count(item: raygent.BatchItem) -> None:
        nonlocal ended
        ended += 1

    options = raygent.ProviderBatch(max_waiting=waiting, gather_seconds=0.2, poll_seconds=0.05)
    async with serve([Rule(reply=Reply(text="ok"))]) as sim:
        bot = raygent.agent(model=model_for("anthropic", sim))
        with caplog.at_level(logging.WARNING):
            result = await raygent.batch(
                bot,
                questions(),
                concurrency=4,
                provider_batch=options,
                on_item=count,
                progress=False,
            )
    assert result.report.succeeded == items, result.report.errors
    assert len(ahead) == items and max(ahead) <= waiting, max(ahead)
    summary = result.report.provider_batch
    assert summary is not None and summary.lines == items
    assert len(summary.batches) >= items // waiting
    assert all(b.lines <= waiting for b in summary.batches)
    warned = [r.getMessage() for r in caplog.records if "provider_batch:" in r.getMessage()]
    assert warned == [
        f"provider_batch: over {waiting} items, at most {waiting} in flight at once"
        " (ProviderBatch(max_waiting=...)): each trip of the job goes in at least 2 provider"
        " batches, one after another"
    ]


async def test_a_list_larger_than_max_waiting_is_warned_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    options = raygent.ProviderBatch(max_waiting=3, gather_seconds=0.1, poll_seconds=0.02)
    async with serve([Rule(reply=Reply(text="ok"))]) as sim:
        bot = raygent.agent(model=model_for("responses", sim))
        with caplog.at_level(logging.WARNING):
            result = await raygent.batch(
                bot, ["a", "b", "c", "d", "e", "f", "g"], provider_batch=options, progress=False
            )
    assert result.report.succeeded == 7
    warned = [r.getMessage() for r in caplog.records if "provider_batch:" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith(
        "provider_batch: 7 items, at most 3 in flight at once"
    )
    assert "at least 3 provider batches" in warned[0]


def test_max_waiting_defaults_to_one_batchs_lines() -> None:
    sim = type("Sim", (), {"openai_base_url": "http://x/v1", "anthropic_base_url": "http://x"})
    openai = raygent.agent(model=model_for("chat", sim))
    anthropic = raygent.agent(model=model_for("anthropic", sim))
    assert max_waiting(raygent.ProviderBatch(), openai) == 50_000
    assert max_waiting(raygent.ProviderBatch(), anthropic) == 100_000
    assert max_waiting(raygent.ProviderBatch(max_lines=500), anthropic) == 500
    assert max_waiting(raygent.ProviderBatch(max_lines=500, max_waiting=9), openai) == 9
    with pytest.raises(ValueError, match="max_waiting"):
        raygent.ProviderBatch(max_waiting=0)


async def _one_trip_job(**options: Any) -> raygent.BatchResult:
    async with serve([Rule(reply=Reply(text="ok"))]) as sim:
        bot = raygent.agent(model=model_for("chat", sim))
        return await raygent.batch(
            bot, [f"q{i}" for i in range(20)], concurrency=4, provider_batch=QUICK, **options
        )


def _texts(output: str) -> list[str]:
    """What the text bar drew, one redraw a line."""
    return [line.strip() for line in output.replace("\r", "\n").splitlines() if line.strip()]


async def test_the_bar_shows_the_batches_out_the_lines_answered_and_the_next_poll(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = await _one_trip_job(progress=True)
    drawn = _texts(capsys.readouterr().err)
    summary = result.report.provider_batch
    assert result.report.succeeded == 20 and summary is not None
    (batch,) = summary.batches
    # While the batch is out (nothing ended, so nothing else moves the bar): its id and
    # the provider's status, the lines answered of those sent, the next poll.
    out = [t for t in drawn if f"batches: 1 out ({batch.id} in_progress), 0 ended" in t]
    assert out and all("0/20 [" in t for t in out), drawn
    assert any("lines 0/20 answered" in t and "next poll in 0s" in t for t in out), out
    # Before it: the lines gathering; after it: the batch ended, every line answered.
    assert any(
        re.search(r"batches: 0 out, 0 ended · lines 0/0 answered · \d+ gathering", t) for t in drawn
    )
    assert "20/20" in drawn[-1] and "batches: 0 out, 1 ended · lines 20/20 answered" in drawn[-1]
    assert drawn.index(out[0]) < len(drawn) - 1
    # The notebook view of the result lists the batches too.
    view = result._repr_html_()
    assert "provider batches</b> · 1 batches · 20 lines (0 trips online)" in view
    assert f"<td>{batch.id}</td><td>openai</td><td>20</td><td>completed</td>" in view


async def test_the_notebook_widget_shows_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list[str] = []

    class Widget(widget_bar):  # type: ignore[misc]
        """The notebook's bar, its text noted at each redraw."""

        def display(self, *args: Any, **kwargs: Any) -> Any:
            shown = super().display(*args, **kwargs)
            text = self.container.children[2].value
            drawn.append(html.unescape(text).replace("\u2007", " "))
            return shown

    monkeypatch.setattr(progress_module, "bar_class", lambda **_: Widget)
    result = await _one_trip_job(progress=True)
    summary = result.report.provider_batch
    assert summary is not None
    (batch,) = summary.batches
    assert any(
        f"batches: 1 out ({batch.id} in_progress), 0 ended · lines 0/20 answered" in t
        for t in drawn
    ), drawn
    assert "batches: 0 out, 1 ended · lines 20/20 answered" in drawn[-1]


@pytest.mark.local_only("the command runs in a process of its own, on the local backend")
async def test_the_cli_takes_max_waiting_and_shows_the_batches(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"input": f"q{i}", "key": i}) + "\n" for i in range(6)))
    sink = tmp_path / "out.jsonl"
    async with serve([Rule(reply="short")]) as sim:
        env = {**driver_env("local"), "RAYGENT_TEST_SIM_URL": sim.openai_base_url}
        command = [
            sys.executable,
            "-m",
            "raygent",
            "batch",
            "tests.provider_batch.pb_cli_agent:bot",
        ]
        options = ["--provider-batch", "--gather-seconds", "0.1", "--poll-seconds", "0.02"]
        done = await asyncio.create_subprocess_exec(
            *command, str(source), "-o", str(sink), *options, "--max-waiting", "2",
            "--concurrency", "1", "--progress",
            env=env, cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        said, _ = await asyncio.wait_for(done.communicate(), 120)
        stats = sim.stats()
    text = said.decode()
    assert done.returncode == 0, text
    assert "provider_batch: over 2 items, at most 2 in flight at once" in text, text
    assert re.search(r"batches: 1 out \(batch_\w+ in_progress\)", text), text
    assert "lines 6/6 answered" in text
    assert len(sink.read_text().splitlines()) == 6 and stats.batch_lines == 6
    creates = [r for r in sim.requests if r.path == "/v1/batches" and r.method == "POST"]
    assert len(creates) >= 3

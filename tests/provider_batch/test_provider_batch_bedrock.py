"""Whole agent runs through Bedrock's batch inference (model invocation jobs), on both
backends: the records in S3 (moto's server), the jobs run by the simulator (which
moto lacks), every request signed and verified (issue #47.2)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from pb_support import (
    CLAUDE_ON_BEDROCK,
    FAST,
    QUICK,
    ROLE,
    TOOL_ROUND,
    bedrock_model,
    lookup,
    online_requests,
)
from shared_support import driver_env

import raygent
import raygent.sim
from raygent import BedrockModel, ProviderBatch
from raygent.models import BedrockBatch
from raygent.sim import serve

CLAUDE = CLAUDE_ON_BEDROCK
LLAMA = "meta.llama3-1-70b-instruct-v1:0"
ROOT = Path(__file__).resolve().parents[2]


def bedrock(sim: Any, moto_s3: str, bucket: str, model_id: str = CLAUDE) -> BedrockModel:
    return bedrock_model(sim.url, moto_s3, bucket, model_id)


@pytest.mark.timeout(300)
async def test_a_job_with_a_tool_round_goes_by_bedrock_jobs_at_the_batch_price(
    moto_s3: str, bucket: str, tmp_path: Path
) -> None:
    items = [{"input": f"question {i}", "key": i} for i in range(150)]
    sink = tmp_path / "out.jsonl"
    async with serve(TOOL_ROUND, s3_endpoint_url=moto_s3) as sim:
        bot = raygent.agent(model=bedrock(sim, moto_s3, bucket), tools=[lookup])
        trips: dict[int, list[tuple[str, str | None]]] = {}
        costs: dict[int, float] = {}

        def seen(item: raygent.BatchItem) -> None:
            trips[item.key] = [(t.via, t.provider_batch) for t in item.result.report.trips]
            costs[item.key] = item.usage.cost.total

        result = await raygent.batch(
            bot, items, provider_batch=FAST, sink=sink, progress=False, on_item=seen
        )
        stats = sim.stats()
        online = await raygent.batch(bot, items[:5], progress=False)  # the price online
    report = result.report
    assert report.succeeded == len(items), (report.errors, report.provider_batch)
    assert online_requests(stats) == 0  # nothing went online
    assert stats.batch_lines == 2 * len(items)  # two trips an item, each a record once
    keys = sorted(json.loads(line)["key"] for line in sink.read_text().splitlines())
    assert keys == list(range(len(items)))
    summary = report.provider_batch
    assert summary is not None and summary.lines == 2 * len(items) and not summary.notes
    assert {b.status for b in summary.batches} == {"Completed"}
    jobs = {b.id for b in summary.batches}
    assert all(len(j) == 12 and j.isalnum() for j in jobs)  # the jobs' ids
    for (via0, job0), (via1, job1) in trips.values():
        assert (via0, via1) == ("batch", "batch") and job0 in jobs and job1 in jobs
        assert job0 != job1
    for item in online.items:  # half the online price (genai-prices' aws rates)
        assert costs[item.key] == pytest.approx(item.usage.cost.total / 2)
    assert summary.cost == pytest.approx(summary.online_cost / 2)


async def test_fewer_lines_than_a_job_takes_go_online_with_a_note(
    moto_s3: str, bucket: str
) -> None:
    items = [{"input": f"question {i}", "key": i} for i in range(12)]
    async with serve(TOOL_ROUND, s3_endpoint_url=moto_s3) as sim:
        bot = raygent.agent(model=bedrock(sim, moto_s3, bucket), tools=[lookup])
        result = await raygent.batch(bot, items, provider_batch=QUICK, progress=False)
        stats = sim.stats()
    assert result.report.succeeded == len(items), result.report.errors
    summary = result.report.provider_batch
    assert summary is not None and summary.batches == []
    assert summary.online_lines == 2 * len(items)
    assert any("a batch takes at least 100" in note for note in summary.notes)
    assert stats.batch_calls == 0 and stats.batch_lines == 0
    assert online_requests(stats) == 2 * len(items)
    for item in result.items:
        assert [t.via for t in item.result.report.trips] == ["online", "online"]


async def test_tools_a_models_jobs_cannot_take_go_online(moto_s3: str, bucket: str) -> None:
    # raygent sends tool definitions by batch to Claude and Nova only: Llama's go online.
    model = bedrock_offline(LLAMA)
    with pytest.raises(raygent.errors.CapabilityError, match="takes no tool definitions"):
        tools = raygent.ModelOptions(tools=(raygent.ToolSpec(name="t"),))
        model.batch_body([raygent.UserMessage(content="x")], tools)
    items = [{"input": f"question {i}", "key": i} for i in range(4)]
    async with serve(TOOL_ROUND, s3_endpoint_url=moto_s3) as sim:
        bot = raygent.agent(model=bedrock(sim, moto_s3, bucket, LLAMA), tools=[lookup])
        result = await raygent.batch(bot, items, provider_batch=QUICK, progress=False)
        stats = sim.stats()
    assert result.report.succeeded == len(items), result.report.errors
    assert stats.batch_calls == 0 and online_requests(stats) == 2 * len(items)


def bedrock_offline(model_id: str) -> BedrockModel:
    batch = BedrockBatch(s3_uri="s3://b/p", role_arn=ROLE)
    keys = {"access_key": "AKIAX", "secret_key": "s"}
    return BedrockModel(model_id, region="us-east-1", batch=batch, **keys)


@pytest.mark.timeout(300)
async def test_an_expired_job_s_unanswered_records_go_online(moto_s3: str, bucket: str) -> None:
    items = [{"input": f"question {i}", "key": i} for i in range(120)]
    options = ProviderBatch(gather_seconds=0.5, poll_seconds=0.05, on_expired="online")
    async with serve(TOOL_ROUND, s3_endpoint_url=moto_s3, batch_expire_after=100) as sim:
        bot = raygent.agent(model=bedrock(sim, moto_s3, bucket), tools=[lookup])
        result = await raygent.batch(bot, items, provider_batch=options, progress=False)
        stats = sim.stats()
    report = result.report
    assert report.succeeded == len(items), report.errors
    summary = report.provider_batch
    assert summary is not None and "Expired" in {b.status for b in summary.batches}
    assert online_requests(stats) >= 20  # what the expired jobs left went online
    assert summary.online_lines == online_requests(stats)


async def test_the_estimate_of_a_bedrock_job_by_batch_is_at_the_batch_price(
    moto_s3: str, bucket: str
) -> None:
    items = [f"question {i}" for i in range(40)]
    async with serve(TOOL_ROUND, s3_endpoint_url=moto_s3) as sim:
        bot = raygent.agent(model=bedrock(sim, moto_s3, bucket), tools=[lookup])
        by_batch = await raygent.estimate(bot, items, sample=10, seed=1, provider_batch=True)
        online = await raygent.estimate(bot, items, sample=10, seed=1)
    assert by_batch.provider_batch and by_batch.items == 40 and by_batch.requests == 80
    assert by_batch.cost_usd is not None and online.cost_usd is not None
    assert by_batch.cost_usd == pytest.approx(online.cost_usd / 2)


@pytest.mark.local_only("the command runs in a process of its own, on the local backend")
async def test_the_cli_sends_a_bedrock_job_by_batch_inference(
    moto_s3: str, bucket: str, tmp_path: Path
) -> None:
    source = tmp_path / "in.jsonl"
    rows = (json.dumps({"input": f"q{i}", "key": i}) + "\n" for i in range(100))
    source.write_text("".join(rows))
    sink = tmp_path / "out.jsonl"
    async with serve([raygent.sim.Rule(reply="short")], s3_endpoint_url=moto_s3) as sim:
        env = {
            **driver_env("local"),
            "RAYGENT_TEST_SIM_URL": sim.url,
            "RAYGENT_TEST_S3_URL": moto_s3,
            "RAYGENT_TEST_S3_BUCKET": bucket,
        }
        agent = "tests.provider_batch.pb_cli_bedrock:bot"
        command = [sys.executable, "-m", "raygent", "batch", agent]
        options = ["--provider-batch", "--gather-seconds", "0.2", "--poll-seconds", "0.02"]
        done = await asyncio.create_subprocess_exec(
            *command, str(source), "-o", str(sink), *options, "--no-progress",
            env=env, cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        said, _ = await asyncio.wait_for(done.communicate(), 120)
        stats = sim.stats()
    text = said.decode()
    assert done.returncode == 0, text
    assert "provider batches: 1, 100 lines" in text and "(online: $" in text
    assert [json.loads(line)["text"] for line in sink.read_text().splitlines()] == ["short"] * 100
    assert online_requests(stats) == 0 and stats.batch_lines == 100


@pytest.mark.local_only("the batch API's own calls: the same on both backends")
async def test_a_submission_cut_off_is_found_again_and_made_once(moto_s3: str, bucket: str) -> None:
    """A driver that died between putting the records and creating the job, or before
    the job's reply, finds it again (by its name, else by its records in S3, made then
    with the tag as idempotency token): one job either way."""
    async with serve(s3_endpoint_url=moto_s3) as sim:
        api: Any = bedrock(sim, moto_s3, bucket).batch_api()
        records = [api.encode(f"{i:016x}-a0-t0-abc", b'{"messages":[]}') for i in range(3)]
        key = api._input_key("rg-cut-0")
        content = b"\n".join(records) + b"\n"
        await api._s3_call("put_object", Bucket=bucket, Key=key, Body=content)
        found = await api.find("rg-cut-0", 0.0, 3)  # records in S3, no job: made now
        again = await api.find("rg-cut-0", 0.0, 3)  # and found by its name from then on
        remade = await api._create("rg-cut-0")  # a create sent twice: the same job
        missing = await api.find("rg-cut-1", 0.0, 3)
        creates = [r for r in sim.requests if r.path == "/model-invocation-job"]
    assert found is not None and found == again == remade
    assert missing is None
    assert len(creates) == 2  # the second create answered by its token, no new job

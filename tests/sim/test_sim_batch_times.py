"""Batch completion times drawn per batch (`BatchTimes`): a seeded lognormal, batches
that stall until cancelled or their window passes, per provider; driven through the
official SDKs (openai, anthropic, google-genai, boto3 against moto's S3) as the other
batch tests are. No wall-clock assertion: each test waits on a condition and checks
order and outcome."""

from __future__ import annotations

import asyncio
import io
import json
import math
import statistics
import time
from typing import Any

import anthropic
import pytest
from anthropic.types.messages import MessageBatch
from bedrock_helpers import Boto
from gemini_sdk import gemini
from google.genai import types
from sim_helpers import Clients
from test_sim_bedrock_jobs import _bucket, _create, _records, _wait

from raygent.sim import BatchTimes, serve
from raygent.sim._batch_common import BatchTimer, Timing


def _request(custom_id: str) -> dict[str, Any]:
    params = {"model": "c", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    return {"custom_id": custom_id, "params": params}


async def _ended(ac: anthropic.AsyncAnthropic, batch_id: str, within: float = 20) -> MessageBatch:
    deadline = time.monotonic() + within
    while True:
        batch = await ac.messages.batches.retrieve(batch_id)
        if batch.processing_status == "ended":
            return batch
        assert time.monotonic() < deadline, f"batch still {batch.processing_status}"
        await asyncio.sleep(0.01)


def test_draws_are_seeded_lognormal_and_apart_per_provider() -> None:
    times = BatchTimes(median_seconds=10.0, spread=0.5, seed=7)
    one = BatchTimer(Timing(), {"openai": times, "anthropic": times})
    two = BatchTimer(Timing(), {"openai": times, "anthropic": times})
    first = [one.draw("openai").seconds for _ in range(2000)]
    # Another provider's batches in between do not move openai's sequence.
    second = []
    for _ in range(2000):
        two.draw("anthropic")
        second.append(two.draw("openai").seconds)
    assert first == second
    assert statistics.median(first) == pytest.approx(10.0, rel=0.05)
    logs = [math.log(s) for s in first]
    assert statistics.stdev(logs) == pytest.approx(0.5, rel=0.05)
    one.reset()
    assert one.draw("openai").seconds == first[0]  # reset: the sequence again
    # A provider with no BatchTimes keeps the fixed timing.
    assert one.draw("gemini") == Timing()


def test_a_share_of_batches_stall_and_the_window_carries_over() -> None:
    timer = BatchTimer(
        Timing(expire_after=5), {"bedrock": BatchTimes(1.0, stall_rate=0.3, window_seconds=9)}
    )
    drawn = [timer.draw("bedrock") for _ in range(1000)]
    assert sum(t.stall for t in drawn) / 1000 == pytest.approx(0.3, abs=0.04)
    assert {(t.window, t.expire_after) for t in drawn} == {(9, 5)}


def test_bad_batch_times_are_refused() -> None:
    with pytest.raises(ValueError, match="stall_rate"):
        BatchTimes(1.0, stall_rate=1.5)
    with pytest.raises(ValueError, match="window_seconds"):
        BatchTimes(1.0, window_seconds=0)
    with pytest.raises(ValueError, match="unknown providers"):
        serve(batch_times={"azure": BatchTimes(1.0)})


async def test_anthropic_batches_end_in_the_order_of_their_drawn_times(clients: Clients) -> None:
    times = BatchTimes(median_seconds=0.3, spread=1.0, seed=26)
    expected = BatchTimer(Timing(), {"anthropic": times})
    drawn = [expected.draw("anthropic").seconds for _ in range(4)]
    # Seed 26 spreads them (0.04 to 0.94 s): their order is not a matter of polling.
    assert min(abs(a - b) for a in drawn for b in drawn if a != b) > 0.25
    async with serve(batch_times={"anthropic": times}) as sim:
        ac = clients.anthropic(sim)
        made = [
            await ac.messages.batches.create(requests=[_request("a"), _request("b")])  # type: ignore[list-item]
            for _ in drawn
        ]
        ended = [await _ended(ac, batch.id) for batch in made]
    order = sorted(range(4), key=lambda i: ended[i].ended_at)
    assert order == sorted(range(4), key=lambda i: drawn[i])
    assert all(b.request_counts.succeeded == 2 for b in ended)


async def test_a_stalled_openai_batch_answers_nothing_until_cancelled(clients: Clients) -> None:
    times = {"openai": BatchTimes(median_seconds=0.05, stall_rate=1.0)}
    async with serve(batch_times=times) as sim:
        oa = clients.openai(sim)
        anth = clients.anthropic(sim)
        content = b"".join(
            json.dumps(
                {"custom_id": c, "method": "POST", "url": "/v1/chat/completions",
                 "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}
            ).encode() + b"\n"
            for c in ("a", "b")
        )  # fmt: skip
        file = await oa.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
        stalled = await oa.batches.create(
            input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        # Anthropic's batches are not named: they keep the fixed timing (at once).
        other = await anth.messages.batches.create(requests=[_request("x")])  # type: ignore[list-item]
        await _ended(anth, other.id)
        await sim.wait_until(lambda s: s.batch_lines == 1)
        assert (await oa.batches.retrieve(stalled.id)).status == "in_progress"
        await oa.batches.cancel(stalled.id)
        deadline = time.monotonic() + 10
        while (batch := await oa.batches.retrieve(stalled.id)).status != "cancelled":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        assert batch.request_counts is not None
        assert (batch.request_counts.completed, batch.request_counts.failed) == (0, 2)
        assert batch.error_file_id is not None
        rows = (await oa.files.content(batch.error_file_id)).text.splitlines()
        assert {json.loads(r)["error"]["code"] for r in rows} == {"batch_cancelled"}
        assert sim.stats().batch_lines == 1  # the anthropic line only


async def test_openai_metadata_stalls_one_batch(clients: Clients) -> None:
    async with serve(batch_times=BatchTimes(window_seconds=0.2)) as sim:
        oa = clients.openai(sim)
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": body}
        file = await oa.files.create(
            file=("in.jsonl", io.BytesIO(json.dumps(line).encode())), purpose="batch"
        )
        made = await oa.batches.create(
            input_file_id=file.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={"sim_stall": "1"},
        )
        deadline = time.monotonic() + 10
        while (batch := await oa.batches.retrieve(made.id)).status != "expired":
            assert batch.status in ("validating", "in_progress"), batch.status
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        assert batch.request_counts is not None and batch.request_counts.failed == 1
        assert sim.stats().batch_lines == 0


async def test_a_batch_past_its_window_expires_with_what_it_answered(clients: Clients) -> None:
    # Drawn 1 s for 4 lines (one every 0.25 s), a 0.6 s window: 2 answered, 2 expired.
    times = {"anthropic": BatchTimes(median_seconds=1.0, window_seconds=0.6)}
    async with serve(batch_times=times) as sim:
        ac = clients.anthropic(sim)
        made = await ac.messages.batches.create(
            requests=[_request(c) for c in "abcd"]  # type: ignore[misc]
        )
        batch = await _ended(ac, made.id)
        counts = batch.request_counts
        assert (counts.succeeded, counts.expired) == (2, 2)
        results = [item.result.type async for item in await ac.messages.batches.results(made.id)]
        assert results == ["succeeded", "succeeded", "expired", "expired"]
        assert sim.stats().batch_lines == 2


def _inline(count: int) -> list[types.InlinedRequest]:
    return [
        types.InlinedRequest(contents=[types.Content(role="user", parts=[types.Part(text="q")])])
        for _ in range(count)
    ]


def _gemini_done(client: Any, name: str) -> types.BatchJob:
    deadline = time.monotonic() + 20
    while True:
        job = client.batches.get(name=name)
        if job.state in (
            types.JobState.JOB_STATE_SUCCEEDED,
            types.JobState.JOB_STATE_CANCELLED,
            types.JobState.JOB_STATE_EXPIRED,
        ):
            return job
        assert time.monotonic() < deadline, job.state
        time.sleep(0.01)


def test_gemini_batches_stall_then_cancel_or_expire() -> None:
    stall = BatchTimes(median_seconds=0.05, stall_rate=1.0, window_seconds=0.3)
    with serve(batch_times={"gemini": stall}) as sim:
        client = gemini(sim)
        expired = _gemini_done(client, client.batches.create(model="gemini-2.5-flash",
                                                              src=_inline(2)).name)  # fmt: skip
        assert expired.state == types.JobState.JOB_STATE_EXPIRED
        assert sim.stats().batch_lines == 0
    with serve(batch_times={"gemini": BatchTimes(0.05, stall_rate=1.0)}) as sim:
        client = gemini(sim)
        name = client.batches.create(model="gemini-2.5-flash", src=_inline(2)).name
        assert client.batches.get(name=name).state in (
            types.JobState.JOB_STATE_PENDING,
            types.JobState.JOB_STATE_RUNNING,
        )
        client.batches.cancel(name=name)
        assert _gemini_done(client, name).state == types.JobState.JOB_STATE_CANCELLED
        assert sim.stats().batch_lines == 0
    with serve(batch_times={"gemini": BatchTimes(0.05, spread=0.2)}) as sim:
        client = gemini(sim)
        done = _gemini_done(client, client.batches.create(model="gemini-2.5-flash",
                                                           src=_inline(3)).name)  # fmt: skip
        assert done.state == types.JobState.JOB_STATE_SUCCEEDED
        assert sim.stats().batch_lines == 3


def test_a_stalled_bedrock_job_expires_at_its_window(boto: Boto, moto_s3: str) -> None:
    s3 = boto.client("s3", moto_s3)
    bucket = _bucket(s3)
    s3.put_object(Bucket=bucket, Key="stall.jsonl", Body=_records(100))
    times = {"bedrock": BatchTimes(median_seconds=0.1, stall_rate=1.0, window_seconds=0.3)}
    with serve(s3_endpoint_url=moto_s3, batch_times=times) as sim:
        bedrock = boto.client("bedrock", sim.url)
        arn = _create(bedrock, bucket, "stall.jsonl", jobName="stall",
                      modelInvocationType="Converse")  # fmt: skip
        job = _wait(bedrock, arn)
        assert job["status"] == "Expired" and job["processedRecordCount"] == 0
        assert sim.stats().batch_lines == 0


async def test_a_cancelled_batch_answers_for_its_cancel_seconds_then_ends(
    clients: Clients,
) -> None:
    # Four lines over 2 s (one every 0.5 s), cancelled once the first is answered: with
    # no cancel time it ends at once; with 0.7 s it answers the line due at 1.0 s too.
    answered = {}
    for cancel in (0.0, 0.7):
        times = {"anthropic": BatchTimes(median_seconds=2.0, cancel_seconds=cancel)}
        async with serve(batch_times=times) as sim:
            ac = clients.anthropic(sim)
            made = await ac.messages.batches.create(
                requests=[_request(c) for c in "abcd"]  # type: ignore[misc]
            )
            await sim.wait_until(lambda s: s.batch_lines >= 1)
            canceling = await ac.messages.batches.cancel(made.id)
            assert canceling.processing_status in ("canceling", "ended")
            batch = await _ended(ac, made.id)
        counts = batch.request_counts
        assert counts.succeeded + counts.canceled == 4
        answered[cancel] = counts.succeeded
    assert answered[0.0] == 1 and 2 <= answered[0.7] <= 3

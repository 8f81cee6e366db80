"""A provider-batch job whose driver is SIGKILLed while its batches are out, started again
with `resume=True`: it polls the batches it had sent instead of sending them again, no
line is sent twice, every item is once in the sink (issue #29; on the Gemini API's batch
mode and Bedrock's model invocation jobs too: issues #46, #47).

The driver is a process of its own (this test kills it); the simulator runs here, takes
a few seconds per batch (so the first batch is out when the driver dies) and counts
every call and every line over both drivers.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from pb_support import (
    TOOL_ROUND,
    creates,
    ledger_count,
    lookup,
    model_at,
    online_requests,
    places,
)
from shared_support import driver_env, kill_when, run_to_end

import raygent
import raygent.sim
from raygent.models.batch_api import OpenAIBatchAPI
from raygent.sim import serve

ITEMS = 300
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# The driver builds its model as the tests do (`pb_support.model_at`, from the places
# given as JSON); its tool is its own (pickled by value for the runners on Ray).
DRIVER = f"""
import asyncio, json, sys
sys.path.insert(0, {str(HERE)!r})
import raygent
from pb_support import model_at

@raygent.tool
def lookup(q: str) -> str:
    '''Look a question up.'''
    return "found " + q

async def main(api, where, sink, resume):
    if api == "gemini-file":  # each batch a JSONL through the Files API, none inline
        from raygent.models import gemini_batch
        gemini_batch._INLINE_LINES_BYTES = 0
    model = model_at(api.removesuffix("-file"), json.loads(where))
    bot = raygent.agent(model=model, tools=[lookup])
    items = [{{"input": f"q{{i}}", "key": i}} for i in range({ITEMS})]
    options = raygent.ProviderBatch(gather_seconds=0.5, poll_seconds=0.1)
    result = await raygent.batch(
        bot, items, provider_batch=options, sink=sink, resume=resume, progress=False
    )
    print("done", result.report.succeeded, result.report.skipped, flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "resume"))
"""


def s3_for(api: str, request: pytest.FixtureRequest) -> dict[str, str]:
    """Bedrock's jobs keep their records in S3: moto's server and a bucket of the test's
    own (other wires: nothing)."""
    if api != "bedrock":
        return {}
    return {"s3": request.getfixturevalue("moto_s3"), "bucket": request.getfixturevalue("bucket")}


@pytest.mark.timeout(600)
@pytest.mark.local_only("the driver is a process of its own, on the backend of the parameter")
@pytest.mark.parametrize(
    ("backend", "api"),
    [
        ("local", "chat"),
        ("local", "anthropic"),
        ("ray", "chat"),
        ("local", "gemini-file"),  # uploaded, then made: a batch found by its file too
        ("ray", "gemini"),  # inline
        # 300 first trips, then 300 second ones: each a job of at least 100 records.
        ("local", "bedrock"),
    ],
)
async def test_a_driver_killed_while_batches_are_out_resumes_them_without_sending_again(
    backend: str, api: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "ray":
        request.getfixturevalue("ray_session")
    s3 = s3_for(api, request)
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    sink = tmp_path / "out.jsonl"
    ledger = tmp_path / "out.jsonl.provider-batches"
    async with serve(TOOL_ROUND, batch_seconds=3.0, s3_endpoint_url=s3.get("s3")) as sim:
        command = [sys.executable, str(script), api, json.dumps(places(sim, **s3)), str(sink)]
        env = driver_env(backend)
        await kill_when([*command, "new"], env, lambda: ledger_count(ledger, "submitted") >= 1)
        out_at_kill = sim.stats()
        said = await run_to_end([*command, "resume"], env)
        stats = sim.stats()
        made = creates(sim.requests)
        uploads = [r for r in sim.requests if r.path.startswith("/upload/")]
    assert bool(uploads) == (api == "gemini-file")
    keys = sorted(json.loads(line)["key"] for line in sink.read_text().splitlines())
    assert keys == list(range(ITEMS))  # every item once
    assert b"done 300 0" in said
    records = [json.loads(line) for line in (ledger / "batches.jsonl").read_text().splitlines()]
    # A batch the kill cut off before it was made has no "submitted" record: its lines
    # went out (once) in a later batch.
    named = {r["submitted"] for r in records if "submitted" in r}
    submits = [r for r in records if r.get("submit") in named]
    sent = [custom_id for r in submits for custom_id in r["lines"]]
    assert out_at_kill.batch_calls >= 1  # the first batch was out when the driver died
    assert len(made) == len(submits)  # no batch submitted twice
    twice = {c for c in sent if sent.count(c) > 1}
    where = [(r["submit"], len(r["lines"]), len(twice & set(r["lines"]))) for r in submits]
    assert len(sent) == len(set(sent)) == 2 * ITEMS, (where, records[-3:])  # no line twice
    assert stats.batch_lines == 2 * ITEMS  # no line sent twice
    assert online_requests(stats) == 0


@pytest.mark.local_only("the provider's API, seen from the pool: no backend involved")
async def test_a_submission_cut_off_after_the_upload_is_found_again_by_its_tag() -> None:
    async with serve(TOOL_ROUND) as sim:
        model = raygent.OpenAIModel("gpt-4o-mini", base_url=sim.openai_base_url, api_key="k")
        api = model.batch_api()
        assert isinstance(api, OpenAIBatchAPI)
        body = model.request_body([raygent.UserMessage(content="hi")], None, stream=False)
        line = json.dumps({"custom_id": "c1", "method": "POST", "url": api.endpoint, "body": body})
        # The file went up, then the driver died before the batch was made.
        await model._call_json(
            "POST",
            "/files",
            files={"file": ("rg-job-0.jsonl", line.encode() + b"\n", "application/jsonl")},
            form={"purpose": "batch"},
        )
        found = await api.find("rg-job-0", 0.0, 1)
        assert found is not None  # made now, from the file found by its name
        again = await api.find("rg-job-0", 0.0, 1)
        assert again == found  # and found by its metadata from then on
        assert await api.find("rg-job-1", 0.0, 1) is None
        made = creates(sim.requests)
    assert len(made) == 1


@pytest.mark.local_only("the command runs in a process of its own, on the local backend")
async def test_the_cli_sends_a_job_by_batch(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"input": f"q{i}", "key": i}) + "\n" for i in range(5)))
    sink = tmp_path / "out.jsonl"
    async with serve([raygent.sim.Rule(reply="short")]) as sim:
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
            *command, str(source), "-o", str(sink), *options, "--no-progress",
            env=env, cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        said, _ = await asyncio.wait_for(done.communicate(), 120)
        stats = sim.stats()
    text = said.decode()
    assert done.returncode == 0, text
    assert "provider batches: 1, 5 lines" in text and "(online: $" in text
    assert [json.loads(line)["text"] for line in sink.read_text().splitlines()] == ["short"] * 5
    assert online_requests(stats) == 0 and stats.batch_lines == 5


@pytest.mark.local_only("the pool and its ledger: the same on both backends")
@pytest.mark.parametrize("api", ["chat", "gemini", "gemini-file", "bedrock"])
async def test_batches_that_ended_while_the_driver_was_down_are_collected_not_sent_again(
    api: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if api == "gemini-file":  # each batch through the Files API, its results a file
        monkeypatch.setattr("raygent.models.gemini_batch._INLINE_LINES_BYTES", 0)
    wire = api.removesuffix("-file")
    s3 = s3_for(wire, request)
    sink = tmp_path / "out.jsonl"
    # 200 items: each batch (first trips, then second ones) a job of >= 100 on Bedrock.
    items = [{"input": f"q{i}", "key": i} for i in range(200)]
    options = raygent.ProviderBatch(gather_seconds=0.3, poll_seconds=0.001)
    async with serve(TOOL_ROUND, s3_endpoint_url=s3.get("s3")) as sim:
        bot = raygent.agent(model=model_at(wire, places(sim, **s3)), tools=[lookup])
        first = await raygent.batch(bot, items, provider_batch=options, sink=sink, progress=False)
        assert first.report.succeeded == 200
        paid = sim.stats()
        # As if the driver had died with both batches out: the ledger knows them as
        # submitted, not as ended; the sink has nothing.
        log = sink.with_name("out.jsonl.provider-batches") / "batches.jsonl"
        log.write_text(
            "".join(x + "\n" for x in log.read_text().splitlines() if '"ended"' not in x)
        )
        sink.unlink()
        again = await raygent.batch(
            bot, items, provider_batch=options, sink=sink, resume=True, progress=False
        )
        stats = sim.stats()
        made = creates(sim.requests)
        downloads = [r for r in sim.requests if r.path.startswith("/download/")]
    assert again.report.succeeded == 200
    assert len(downloads) == (4 if api == "gemini-file" else 0)  # each batch's, twice
    assert stats.batch_lines == paid.batch_lines == 400  # nothing sent again
    assert online_requests(stats) == 0
    assert len(made) == 2
    keys = sorted(json.loads(line)["key"] for line in sink.read_text().splitlines())
    assert keys == list(range(200))

"""`provider_batch=` on Gemini, on both backends (issue 46.2): the Gemini API's batch
mode (inline, or a JSONL through the Files API), keyed lines matched by key, at half the
online price, with few calls an item; the enqueued-token quota's 429 waited out with no
line lost; Vertex AI batch prediction over Cloud Storage; Vertex AI without a bucket
refused before anything is sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from google.oauth2.credentials import Credentials
from pb_support import QUICK, TOOL_ROUND, lookup, online_requests

import raygent
from raygent import GeminiModel, ProviderBatch
from raygent.errors import InvalidOptionsError
from raygent.models.gemini_batch import GeminiBatchAPI
from raygent.sim import Fault, Match, Reply, Rule, serve

FLASH = "gemini-2.5-flash"
KEY = "gemini-batch-key"
BUCKET = "gs://sim-batches/jobs"


def gemini(sim: Any, **settings: Any) -> GeminiModel:
    return GeminiModel(FLASH, api_key=KEY, base_url=sim.gemini_base_url, **settings)


def vertex(sim: Any, **settings: Any) -> GeminiModel:
    return GeminiModel(
        FLASH,
        vertex=True,
        project="sim-project",
        credentials=Credentials(token=KEY),
        base_url=sim.gemini_base_url,
        storage_url=sim.url,
        **settings,
    )


MAKERS = {"gemini": gemini, "vertex": vertex}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("endpoint", ["gemini", "vertex"])
async def test_a_job_with_a_tool_round_goes_by_batch_at_half_the_price(
    endpoint: str, tmp_path: Path
) -> None:
    items = [{"input": f"question {i}", "key": i} for i in range(200)]
    sink = tmp_path / "out.jsonl"
    options = ProviderBatch(gather_seconds=0.5, poll_seconds=0.05)
    async with serve(TOOL_ROUND, api_key=KEY) as sim:
        model = MAKERS[endpoint](sim, batch_bucket=BUCKET)
        bot = raygent.agent(model=model, tools=[lookup])
        costs: dict[int, float] = {}

        def seen(item: raygent.BatchItem) -> None:
            costs[item.key] = item.usage.cost.total

        result = await raygent.batch(
            bot, items, provider_batch=options, sink=sink, progress=False, on_item=seen
        )
        stats = sim.stats()
        online = await raygent.batch(bot, items[:10], progress=False)
    report = result.report
    assert report.succeeded == len(items), (report.errors, report.provider_batch)
    assert online_requests(stats) == 0 and stats.batch_lines == 2 * len(items)
    keys = sorted(json.loads(line)["key"] for line in sink.read_text().splitlines())
    assert keys == list(range(len(items)))
    summary = report.provider_batch
    assert summary is not None and all(b.ended for b in summary.batches)
    for item in online.items:  # genai-prices' batch rates: half the online ones
        assert costs[item.key] == pytest.approx(item.usage.cost.total / 2)
    assert summary.cost == pytest.approx(summary.online_cost / 2)
    # Uploads, creates, polls and downloads, amortised over the items.
    assert stats.batch_calls / len(items) <= 0.1, stats.batch_calls


async def test_a_large_batch_goes_as_a_file_through_the_files_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every batch over "20 MB" (here: over nothing) goes as a JSONL through the Files API.
    monkeypatch.setattr("raygent.models.gemini_batch._INLINE_LINES_BYTES", 0)
    async with serve(TOOL_ROUND, api_key=KEY) as sim:
        bot = raygent.agent(model=gemini(sim), tools=[lookup])
        result = await raygent.batch(
            bot, [f"q{i}" for i in range(6)], provider_batch=QUICK, progress=False
        )
        creates = [r for r in sim.requests if r.path.endswith(":batchGenerateContent")]
        uploads = [r for r in sim.requests if r.path.startswith("/upload/v1beta/files")]
    assert result.report.succeeded == 6
    assert len(uploads) == 2 * len(creates) > 0  # each a start and its finalising chunk
    assert result.items[0].data == "answered"


async def test_inline_lines_are_keyed_and_line_errors_are_typed() -> None:
    script = [
        Rule(match=Match(last_user="bad"), reply=Reply(fault=Fault(kind="status", status=400))),
        Rule(reply=Reply(text="fine")),
    ]
    async with serve(script, api_key=KEY) as sim:
        bot = raygent.agent(model=gemini(sim))
        result = await raygent.batch(
            bot, ["ok", "bad", "ok too"], provider_batch=QUICK, progress=False
        )
        creates = [r for r in sim.requests if r.path.endswith(":batchGenerateContent")]
        uploads = [r for r in sim.requests if r.path.startswith("/upload/")]
    assert len(creates) == 1 and not uploads  # one batch, its lines inline
    # Each answer matched to its line by key: the bad one failed, alone.
    ok, bad, ok_too = result.items
    assert ok.data == ok_too.data == "fine"
    assert bad.status == "failed" and bad.error.code == "PROVIDER_INVALID_REQUEST"


async def test_the_enqueued_token_quota_is_waited_out_and_no_line_is_lost() -> None:
    """Batches of two lines, a quota for about one batch at a time: the batches the
    quota refuses (429, no delay given) wait and go once earlier ones end."""
    options = ProviderBatch(gather_seconds=0.1, poll_seconds=0.02, max_lines=2, max_waiting=8)
    async with serve(
        [Rule(reply=Reply(text="done"))], api_key=KEY, batch_enqueued_tokens=15, batch_seconds=0.3
    ) as sim:
        bot = raygent.agent(model=gemini(sim))
        result = await raygent.batch(
            bot, [f"q{i}" for i in range(8)], provider_batch=options, progress=False
        )
        refused = sim.stats().by_status.get(429, 0)
    assert result.report.succeeded == 8, result.report.errors
    assert refused >= 1  # the quota did refuse, and the refused batches went later


async def test_a_resource_exhausted_create_waits_with_its_lines_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with serve([Rule(reply=Reply(text="done"))], api_key=KEY) as sim:
        api = GeminiBatchAPI(gemini(sim))
        calls: list[int] = []
        real = GeminiBatchAPI._room

        async def full_once(self: GeminiBatchAPI) -> None:
            calls.append(1)
            if len(calls) == 1:  # 100 batches out at the first look
                raise raygent.errors.RateLimitError("full", provider="gemini", status=None)
            await real(self)

        monkeypatch.setattr(GeminiBatchAPI, "_room", full_once)
        monkeypatch.setattr("raygent.models.gemini_batch._FIRST_WAIT", 0.01)
        body = gemini(sim).request_body([raygent.UserMessage(content="hi")], None, stream=False)
        line = api.encode("line-1", json.dumps(body).encode())
        batch_id = await api.submit([line], "rg-test")
    assert batch_id.startswith("batches/") and len(calls) == 2


def test_vertex_without_a_bucket_is_refused_naming_it() -> None:
    model = GeminiModel(FLASH, vertex=True, project="p", credentials=Credentials(token="t"))
    assert model.batch_api() is None
    bot = raygent.agent(model=model)
    with pytest.raises(InvalidOptionsError, match="batch_bucket"):
        raygent.batch_sync(bot, ["x"], provider_batch=True, progress=False)


@pytest.mark.local_only("the provider's API, seen from the pool: no backend involved")
@pytest.mark.parametrize("endpoint", ["gemini", "vertex"])
async def test_a_submission_cut_off_is_found_again_by_its_tag_and_made_once(
    endpoint: str,
) -> None:
    """A driver that died after the batch was made but before its ledger said so finds
    it again by its display name; on the Gemini API, one that died between the upload
    and the create makes the batch from the file found by its name, once."""
    async with serve(TOOL_ROUND) as sim:
        model = gemini(sim) if endpoint == "gemini" else vertex(sim, batch_bucket=BUCKET)
        api: Any = model.batch_api()
        body = model.request_body([raygent.UserMessage(content="hi")], None, stream=False)
        lines = [api.encode(f"{i:016x}-a0-t0-cut", json.dumps(body).encode()) for i in range(3)]
        made = await api.submit(lines, "rg-cut-0")  # made; its "submitted" record lost
        found = await api.find("rg-cut-0", 0.0, 3)
        missing = await api.find("rg-cut-9", 0.0, 3)
        uploaded = None
        if endpoint == "gemini":  # the file went up, the create never did
            await api._upload(lines, "rg-cut-1")
            uploaded = await api.find("rg-cut-1", 0.0, 3)
            assert uploaded is not None and uploaded != made
            assert await api.find("rg-cut-1", 0.0, 3) == uploaded  # by its name from then on
        creates = [
            r
            for r in sim.requests
            if r.method == "POST"
            and (
                r.path.endswith(":batchGenerateContent") or r.path.endswith("/batchPredictionJobs")
            )
        ]
    assert found == made and missing is None
    assert len(creates) == (2 if endpoint == "gemini" else 1)  # nothing made twice

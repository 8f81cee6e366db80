"""Gemini's resource APIs on the simulator, through google-genai: explicit context
caches, the Files API (resumable uploads, downloads) and batch mode."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable

import httpx
import pytest
from gemini_sdk import KEY, gemini, post, strict, text_body, vertex
from google.genai import errors, types

from raygent.sim import serve

FLASH = "gemini-2.5-flash"
LONG = "A shared policy document, long enough to be worth caching. " * 80
DONE = {
    types.JobState.JOB_STATE_SUCCEEDED,
    types.JobState.JOB_STATE_FAILED,
    types.JobState.JOB_STATE_CANCELLED,
    types.JobState.JOB_STATE_EXPIRED,
}


def until(check: Callable[[], types.BatchJob], timeout: float = 10.0) -> types.BatchJob:
    """Poll a batch until it is done (a bounded wait on a condition)."""
    deadline = time.monotonic() + timeout
    while True:
        job = check()
        if job.state in DONE:
            return job
        assert time.monotonic() < deadline, f"batch not done in {timeout}s: {job.state}"
        time.sleep(0.01)


def test_cached_contents_lifecycle_and_use() -> None:
    with serve(api_key=KEY) as sim:
        client = gemini(sim)
        cache = client.caches.create(
            model=FLASH,
            config=types.CreateCachedContentConfig(
                contents=[LONG],
                system_instruction="Answer from the policy.",
                ttl="300s",
                display_name="policy",
            ),
        )
        assert cache.name.startswith("cachedContents/") and cache.display_name == "policy"
        tokens = cache.usage_metadata.total_token_count
        assert tokens >= 1024
        reply = client.models.generate_content(
            model=FLASH,
            contents="What does it say?",
            config=types.GenerateContentConfig(cached_content=cache.name),
        )
        usage = reply.usage_metadata
        assert usage.cached_content_token_count == tokens
        assert usage.prompt_token_count > tokens
        counted = client.models.count_tokens(model=FLASH, contents="What does it say?")
        assert counted.total_tokens == usage.prompt_token_count - tokens
        assert [c.name for c in client.caches.list()] == [cache.name]
        later = client.caches.update(
            name=cache.name, config=types.UpdateCachedContentConfig(ttl="7200s")
        )
        assert later.expire_time > cache.expire_time
        with pytest.raises(errors.ClientError) as beside:
            client.models.generate_content(
                model=FLASH,
                contents="x",
                config=types.GenerateContentConfig(
                    cached_content=cache.name, system_instruction="other"
                ),
            )
        assert (
            "CachedContent can not be used with GenerateContent request setting"
            in beside.value.message
        )
        with pytest.raises(errors.ClientError) as other_model:
            client.models.generate_content(
                model="gemini-2.5-pro",
                contents="x",
                config=types.GenerateContentConfig(cached_content=cache.name),
            )
        assert "has to be the same" in other_model.value.message
        client.caches.delete(name=cache.name)
        with pytest.raises(errors.ClientError) as gone:
            client.models.generate_content(
                model=FLASH,
                contents="x",
                config=types.GenerateContentConfig(cached_content=cache.name),
            )
        assert gone.value.code == 403 and gone.value.status == "PERMISSION_DENIED"
        with pytest.raises(errors.ClientError) as small:
            client.caches.create(
                model=FLASH, config=types.CreateCachedContentConfig(contents=["short"])
            )
        assert "Cached content is too small" in small.value.message


def test_an_expired_cache_is_gone() -> None:
    with serve() as sim:
        client = gemini(sim)
        cache = client.caches.create(
            model=FLASH, config=types.CreateCachedContentConfig(contents=[LONG])
        )
        client.caches.update(
            name=cache.name,
            config=types.UpdateCachedContentConfig(expire_time="2000-01-01T00:00:00Z"),
        )
        with pytest.raises(errors.ClientError):
            client.caches.get(name=cache.name)
        assert list(client.caches.list()) == []


def test_vertex_caches_live_under_the_project_and_location() -> None:
    with serve() as sim:
        client = vertex(sim)
        cache = client.caches.create(
            model=FLASH, config=types.CreateCachedContentConfig(contents=[LONG])
        )
        assert cache.name.startswith("projects/sim-project/locations/global/cachedContents/")
        reply = client.models.generate_content(
            model=FLASH, contents="q", config=types.GenerateContentConfig(cached_content=cache.name)
        )
        assert (
            reply.usage_metadata.cached_content_token_count
            == cache.usage_metadata.total_token_count
        )
        assert [c.name for c in gemini(sim).caches.list()] == []  # the Gemini API's are apart


def _inline(texts: list[str]) -> list[types.InlinedRequest]:
    return [
        types.InlinedRequest(
            contents=[types.Content(role="user", parts=[types.Part(text=t)])],
            metadata={"key": f"k{i}"},
        )
        for i, t in enumerate(texts)
    ]


def test_inline_batch_results_come_in_input_order_with_their_keys() -> None:
    texts = ["first", "second", "third"]
    with serve(api_key=KEY, batch_seconds=0.2) as sim:
        client = gemini(sim)
        job = client.batches.create(
            model=FLASH, src=_inline(texts), config={"display_name": "three"}
        )
        assert job.state == types.JobState.JOB_STATE_PENDING and job.display_name == "three"
        seen = {job.state}
        deadline = time.monotonic() + 10
        while job.state not in DONE:
            assert time.monotonic() < deadline
            job = client.batches.get(name=job.name)
            seen.add(job.state)
            time.sleep(0.01)
        assert job.state == types.JobState.JOB_STATE_SUCCEEDED
        assert types.JobState.JOB_STATE_RUNNING in seen
        results = job.dest.inlined_responses
        assert [r.metadata for r in results] == [{"key": f"k{i}"} for i in range(3)]
        assert [r.response.text for r in results] == [f"Simulated reply to: {t}" for t in texts]
        raw = httpx.get(f"{sim.url}/v1beta/{job.name}", headers={"x-goog-api-key": KEY}).json()
        assert raw["done"] is True and raw["metadata"]["state"] == "BATCH_STATE_SUCCEEDED"
        assert raw["metadata"]["batchStats"] == {"requestCount": "3", "successfulRequestCount": "3"}
        for line in raw["response"]["inlinedResponses"]["inlinedResponses"]:
            strict(line["response"])
        stats = sim.stats()
        assert stats.batch_lines == 3 and stats.by_api["gemini_batch"] == stats.batch_calls


def test_file_batch_through_the_files_api() -> None:
    lines = [
        {"key": "b", "request": text_body("beta")},
        {"key": "a", "request": text_body("alpha")},
        {"key": "bad", "request": {"contents": []}},
    ]
    content = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    with serve(api_key=KEY) as sim:
        client = gemini(sim)
        uploaded = client.files.upload(
            file=io.BytesIO(content),
            config=types.UploadFileConfig(mime_type="application/jsonl", display_name="in"),
        )
        assert uploaded.state == types.FileState.ACTIVE and uploaded.size_bytes == len(content)
        assert client.files.get(name=uploaded.name).display_name == "in"
        name = client.batches.create(model=FLASH, src=uploaded.name).name
        job = until(lambda: client.batches.get(name=name))
        assert job.state == types.JobState.JOB_STATE_SUCCEEDED
        out = client.files.download(file=job.dest.file_name).decode().splitlines()
        rows = [json.loads(row) for row in out]
        assert [r["key"] for r in rows] == ["b", "a", "bad"]
        assert (
            rows[0]["response"]["candidates"][0]["content"]["parts"][0]["text"]
            == "Simulated reply to: beta"
        )
        assert rows[2]["error"]["status"] == "INVALID_ARGUMENT" and "response" not in rows[2]
        strict(rows[1]["response"])
        generated = client.files.get(name=job.dest.file_name)
        assert generated.source == types.FileSource.GENERATED
        with pytest.raises(errors.ClientError):
            client.files.download(file=uploaded.name)  # uploaded files are not downloadable
        assert {f.name for f in client.files.list()} == {uploaded.name, job.dest.file_name}
        client.files.delete(name=uploaded.name)
        with pytest.raises(errors.ClientError):
            client.files.get(name=uploaded.name)


def test_resumable_upload_protocol_in_chunks() -> None:
    data = b'{"key":"x","request":{"contents":[{"parts":[{"text":"hi"}]}]}}\n'
    with serve(api_key=KEY) as sim:
        start = httpx.post(
            f"{sim.url}/upload/v1beta/files",
            headers={
                "x-goog-api-key": KEY,
                "X-Goog-Upload-Protocol": "resumable",
                "X-Goog-Upload-Command": "start",
                "X-Goog-Upload-Header-Content-Length": str(len(data)),
                "X-Goog-Upload-Header-Content-Type": "application/jsonl",
            },
            json={"file": {"displayName": "chunked"}},
        )
        assert start.headers["X-Goog-Upload-Status"] == "active"
        url = start.headers["X-Goog-Upload-URL"]
        first = httpx.post(
            url,
            headers={"X-Goog-Upload-Command": "upload", "X-Goog-Upload-Offset": "0"},
            content=data[:20],
        )
        assert first.headers["X-Goog-Upload-Status"] == "active"
        wrong = httpx.post(
            url,
            headers={"X-Goog-Upload-Command": "upload", "X-Goog-Upload-Offset": "0"},
            content=data[20:],
        )
        assert wrong.status_code == 400
        last = httpx.post(
            url,
            headers={"X-Goog-Upload-Command": "upload, finalize", "X-Goog-Upload-Offset": "20"},
            content=data[20:],
        )
        assert last.headers["X-Goog-Upload-Status"] == "final"
        file = types.File.model_validate(last.json()["file"])
        assert file.size_bytes == len(data) and file.mime_type == "application/jsonl"


def test_cancel_delete_and_list_batches() -> None:
    with serve(batch_seconds=30) as sim:
        client = gemini(sim)
        job = client.batches.create(model=FLASH, src=_inline(["a", "b"]))
        client.batches.cancel(name=job.name)
        job = until(lambda: client.batches.get(name=job.name))
        assert job.state == types.JobState.JOB_STATE_CANCELLED
        other = client.batches.create(model=FLASH, src=_inline(["c"]))
        names = [b.name for b in client.batches.list(config={"page_size": 1})]
        assert names == [other.name, job.name]  # newest first, over two pages
        client.batches.delete(name=other.name)
        with pytest.raises(errors.ClientError):
            client.batches.get(name=other.name)


def test_a_batch_expires_after_its_window() -> None:
    with serve(batch_expire_after=1) as sim:
        client = gemini(sim)
        name = client.batches.create(model=FLASH, src=_inline(["a", "b"])).name
        job = until(lambda: client.batches.get(name=name))
        assert job.state == types.JobState.JOB_STATE_EXPIRED
        assert [r.metadata for r in job.dest.inlined_responses] == [{"key": "k0"}]


def test_enqueued_token_quota_refuses_with_429_and_no_delay() -> None:
    with serve(batch_seconds=30, batch_enqueued_tokens=40) as sim:
        client = gemini(sim)
        first = client.batches.create(model=FLASH, src=_inline(["a" * 80]))
        refused = post(
            sim,
            f"/v1beta/models/{FLASH}:batchGenerateContent",
            {
                "batch": {
                    "inputConfig": {"requests": {"requests": [{"request": text_body("b" * 80)}]}}
                }
            },
        )
        assert refused.status_code == 429
        assert "retry-after" not in refused.headers
        error = refused.json()["error"]
        assert error["status"] == "RESOURCE_EXHAUSTED"
        assert [d["@type"].rsplit(".", 1)[-1] for d in error["details"]] == ["QuotaFailure"]
        assert client.batches.create(
            model="gemini-2.5-pro", src=_inline(["c" * 80])
        ).name  # per model
        client.batches.cancel(name=first.name)
        until(lambda: client.batches.get(name=first.name))
        assert client.batches.create(model=FLASH, src=_inline(["d" * 80])).name  # freed


def _gcs_put(sim_url: str, bucket: str, name: str, content: bytes) -> dict[str, object]:
    response = httpx.post(
        f"{sim_url}/upload/storage/v1/b/{bucket}/o",
        params={"uploadType": "media", "name": name},
        content=content,
        headers={"Content-Type": "application/jsonl", "Authorization": f"Bearer {KEY}"},
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_vertex_batch_prediction_over_cloud_storage() -> None:
    lines = [
        {"request": text_body("north")},
        {"request": text_body("south")},
        {"request": {"contents": []}},
    ]
    content = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    with serve(api_key=KEY, batch_seconds=0.1) as sim:
        stored = _gcs_put(sim.url, "in-bucket", "jobs/input.jsonl", content)
        assert stored["size"] == str(len(content)) and stored["bucket"] == "in-bucket"
        client = vertex(sim)
        job = client.batches.create(
            model=FLASH,
            src="gs://in-bucket/jobs/input.jsonl",
            config=types.CreateBatchJobConfig(
                dest="gs://out-bucket/results", display_name="regions"
            ),
        )
        assert job.name.startswith("projects/sim-project/locations/global/batchPredictionJobs/")
        assert job.state == types.JobState.JOB_STATE_PENDING
        job = until(lambda: client.batches.get(name=job.name))
        assert job.state == types.JobState.JOB_STATE_SUCCEEDED
        assert job.dest.gcs_uri == "gs://out-bucket/results"
        assert (job.completion_stats.successful_count, job.completion_stats.failed_count) == (2, 1)
        auth = {"Authorization": f"Bearer {KEY}"}
        listed = httpx.get(
            f"{sim.url}/storage/v1/b/out-bucket/o", params={"prefix": "results/"}, headers=auth
        ).json()
        [item] = listed["items"]
        assert item["name"].endswith("/predictions.jsonl")
        assert (
            job.output_info.gcs_output_directory
            == f"gs://out-bucket/{item['name'].rsplit('/', 1)[0]}"
        )
        rows = [json.loads(r) for r in httpx.get(item["mediaLink"], headers=auth).text.splitlines()]
        assert [r["request"] for r in rows] == [line["request"] for line in lines]
        assert (
            rows[0]["status"] == ""
            and strict(rows[0]["response"], vertex=True).text == "Simulated reply to: north"
        )
        assert rows[2]["status"].startswith("Bad Request") and "response" not in rows[2]
        assert [b.name for b in client.batches.list()] == [job.name]
        client.batches.delete(name=job.name)
        assert list(client.batches.list()) == []
        assert sim.stats().batch_lines == 3


def test_vertex_batch_prediction_cancel_and_a_missing_input() -> None:
    with serve(batch_seconds=30) as sim:
        _gcs_put(sim.url, "b", "in.jsonl", json.dumps({"request": text_body("x")}).encode())
        client = vertex(sim)
        job = client.batches.create(
            model=FLASH, src="gs://b/in.jsonl", config={"dest": "gs://b/out"}
        )
        client.batches.cancel(name=job.name)
        assert (
            until(lambda: client.batches.get(name=job.name)).state
            == types.JobState.JOB_STATE_CANCELLED
        )
        with pytest.raises(errors.ClientError) as missing:
            client.batches.create(
                model=FLASH, src="gs://b/none.jsonl", config={"dest": "gs://b/out"}
            )
        assert "no such object" in missing.value.message

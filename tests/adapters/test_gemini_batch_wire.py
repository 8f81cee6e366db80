"""The Gemini batch wire against the simulator's batch mode and Vertex AI batch
prediction: lines encoded, batches created inline or from a file, states and results
read into the shapes the provider-batch pool routes (`split_results` by `custom_id`)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pydantic_core

from raygent.errors import InvalidRequestError
from raygent.messages import UserMessage
from raygent.models import _gemini_batch_wire as batch_wire
from raygent.models import _gemini_wire as wire
from raygent.models.batch_api import split_results
from raygent.models.contract import Capabilities, ModelOptions
from raygent.sim import serve

FLASH = "gemini-2.5-flash"
KEY = {"x-goog-api-key": "k"}


def line_body(text: str) -> bytes:
    body = wire.request_body(FLASH, [UserMessage(content=text)], ModelOptions(), Capabilities())
    return pydantic_core.to_json(body)


def wait_done(url: str, name: str, headers: dict[str, str]) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:
        resource: dict[str, Any] = httpx.get(f"{url}/{name}", headers=headers).json()
        if batch_wire.state(resource).ended:
            return resource
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_inline_batch_lines_come_back_by_custom_id() -> None:
    lines = [batch_wire.encode(f"item-{i}", line_body(t)) for i, t in enumerate(["one", "two"])]
    lines.append(batch_wire.encode("item-bad", b'{"contents": []}'))
    with serve() as sim:
        created = httpx.post(
            f"{sim.url}/v1beta/models/{FLASH}:batchGenerateContent",
            json=batch_wire.create_body("job-1", lines=lines),
            headers=KEY,
        ).json()
        first = batch_wire.state(created)
        assert not first.ended and first.status == "BATCH_STATE_PENDING" and first.created_at
        done = wait_done(sim.url + "/v1beta", created["name"], KEY)
    final = batch_wire.state(done)
    assert final.ended and final.status == "BATCH_STATE_SUCCEEDED" and final.files == ()
    routed = dict(split_results(batch_wire.results(done)))
    assert list(routed) == ["item-0", "item-1", "item-bad"]
    ok = batch_wire.read_line(routed["item-1"])
    assert ok.outcome == "succeeded" and wire.read_reply(ok.body).text == "Simulated reply to: two"
    bad = batch_wire.read_line(routed["item-bad"])
    assert bad.outcome == "errored" and isinstance(bad.error, InvalidRequestError)


def test_file_batch_results_come_from_the_responses_file() -> None:
    content = b"".join(batch_wire.encode(f"k{i}", line_body(f"q{i}")) + b"\n" for i in range(3))
    with serve() as sim:
        start = httpx.post(
            f"{sim.url}/upload/v1beta/files",
            headers={
                **KEY,
                "X-Goog-Upload-Protocol": "resumable",
                "X-Goog-Upload-Command": "start",
                "X-Goog-Upload-Header-Content-Length": str(len(content)),
            },
            json={"file": {"displayName": "lines"}},
        )
        final = httpx.post(
            start.headers["X-Goog-Upload-URL"],
            headers={"X-Goog-Upload-Command": "upload, finalize", "X-Goog-Upload-Offset": "0"},
            content=content,
        ).json()
        body = batch_wire.create_body("job-2", file_name=final["file"]["name"])
        created = httpx.post(
            f"{sim.url}/v1beta/models/{FLASH}:batchGenerateContent", json=body, headers=KEY
        )
        done = wait_done(sim.url + "/v1beta", created.json()["name"], KEY)
        [responses] = batch_wire.state(done).files
        raw = httpx.get(
            f"{sim.url}/download/v1beta/{responses}:download", params={"alt": "media"}, headers=KEY
        )
    routed = list(split_results(batch_wire.results(done, raw.content)))
    assert [custom_id for custom_id, _ in routed] == ["k0", "k1", "k2"]
    assert all(batch_wire.read_line(line).outcome == "succeeded" for _, line in routed)


def test_a_cancelled_batchs_unanswered_lines_read_as_cancelled() -> None:
    lines = [batch_wire.encode("a", line_body("x")), batch_wire.encode("b", line_body("y"))]
    with serve(batch_seconds=30) as sim:
        created = httpx.post(
            f"{sim.url}/v1beta/models/{FLASH}:batchGenerateContent",
            json=batch_wire.create_body("job-3", lines=lines),
            headers=KEY,
        ).json()
        httpx.post(f"{sim.url}/v1beta/{created['name']}:cancel", headers=KEY)
        done = wait_done(sim.url + "/v1beta", created["name"], KEY)
    assert batch_wire.state(done).status == "BATCH_STATE_CANCELLED"
    assert batch_wire.results(done) == b""  # nothing answered: the pool fails the lines
    unanswered = batch_wire.read_line(b'{"custom_id": "a"}', "BATCH_STATE_CANCELLED")
    assert unanswered.outcome == "cancelled"


def test_vertex_batch_prediction_lines_keep_their_id_in_labels() -> None:
    auth = {"Authorization": "Bearer t"}
    content = b"".join(
        batch_wire.encode_vertex(f"v{i}", line_body(f"r{i}")) + b"\n" for i in range(2)
    )
    with serve() as sim:
        put = httpx.post(
            f"{sim.url}/upload/storage/v1/b/bkt/o",
            params={"uploadType": "media", "name": "in.jsonl"},
            content=content,
            headers=auth,
        )
        assert put.status_code == 200
        parent = f"{sim.url}/v1/projects/p/locations/us-central1/batchPredictionJobs"
        body = batch_wire.vertex_create_body("job-v", FLASH, "gs://bkt/in.jsonl", "gs://bkt/out")
        assert body["model"] == f"publishers/google/models/{FLASH}"
        created = httpx.post(parent, json=body, headers=auth).json()
        done = wait_done(sim.url + "/v1", created["name"], auth)
        state = batch_wire.state(done)
        assert state.status == "JOB_STATE_SUCCEEDED"
        [predictions] = state.files
        bucket, name = predictions[5:].split("/", 1)
        raw = httpx.get(
            f"{sim.url}/storage/v1/b/{bucket}/o/{name.replace('/', '%2F')}",
            params={"alt": "media"},
            headers=auth,
        )
    routed = dict(split_results(batch_wire.results(done, raw.content)))
    assert list(routed) == ["v0", "v1"]
    read = batch_wire.read_line(routed["v0"])
    assert (
        read.outcome == "succeeded" and wire.read_reply(read.body).text == "Simulated reply to: r0"
    )
    assert json.loads(routed["v1"])["request"]["labels"] == {batch_wire.KEY_LABEL: "v1"}

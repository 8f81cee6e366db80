"""The batch APIs, driven through the official SDKs (which parse every response)."""

from __future__ import annotations

import asyncio
import io
import json
import time
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types.messages import MessageBatch, MessageBatchIndividualResponse
from openai.types import Batch
from sim_helpers import Clients, assert_no_extra, validate_anthropic, validate_openai

from raygent.sim import Fault, Match, Reply, Rule, Script, serve

SCRIPT = Script(
    rules=[
        Rule(match=Match(last_user="boom"), reply=Reply(fault=Fault(kind="status", status=500))),
        Rule(match=Match(last_user="garbage"), reply=Reply(fault=Fault(kind="not_json"))),
        Rule(reply=Reply(text="Batched hello.")),
    ]
)


def _line(custom_id: str, text: str = "hi", url: str = "/v1/chat/completions") -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": text}]}
    if url == "/v1/responses":
        body = {"model": "m", "input": text}
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def _jsonl(lines: list[Any]) -> bytes:
    return b"".join((x if isinstance(x, bytes) else json.dumps(x).encode()) + b"\n" for x in lines)


async def _upload(oa: openai.AsyncOpenAI, lines: list[Any]) -> str:
    file = await oa.files.create(file=("in.jsonl", io.BytesIO(_jsonl(lines))), purpose="batch")
    assert_no_extra(file)
    assert (file.purpose, file.status, file.bytes) == ("batch", "processed", len(_jsonl(lines)))
    return file.id


async def _settle(oa: openai.AsyncOpenAI, batch_id: str, timeout: float = 10.0) -> Batch:
    """Poll (bounded) until the batch reaches a final status."""
    deadline = time.monotonic() + timeout
    while True:
        batch = await oa.batches.retrieve(batch_id)
        assert_no_extra(batch)
        if batch.status in ("completed", "failed", "expired", "cancelled"):
            return batch
        assert time.monotonic() < deadline, f"batch still {batch.status}"
        await asyncio.sleep(0.01)


async def _lines(oa: openai.AsyncOpenAI, file_id: str | None) -> dict[str, dict[str, Any]]:
    if file_id is None:
        return {}
    content = await oa.files.content(file_id)
    rows = [json.loads(line) for line in content.text.splitlines()]
    for row in rows:
        assert set(row) == {"id", "custom_id", "response", "error"}
    return {row["custom_id"]: row for row in rows}


async def test_openai_batch_completes(clients: Clients) -> None:
    async with serve(SCRIPT) as sim:
        oa = clients.openai(sim)
        lines = [_line("a"), _line("b", "boom"), _line("c", "garbage"), _line("d")]
        file_id = await _upload(oa, lines)
        created = await oa.batches.create(
            input_file_id=file_id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={"trip": "1"},
        )
        assert created.status == "validating" and created.metadata == {"trip": "1"}
        batch = await _settle(oa, created.id)
        assert batch.status == "completed"
        assert batch.request_counts is not None
        assert batch.request_counts.model_dump() == {"total": 4, "completed": 2, "failed": 2}
        assert batch.in_progress_at and batch.finalizing_at and batch.completed_at
        assert batch.completed_at >= batch.created_at
        out = await _lines(oa, batch.output_file_id)
        assert sorted(out) == ["a", "d"]
        for row in out.values():
            assert row["error"] is None and row["response"]["status_code"] == 200
            assert row["response"]["request_id"].startswith("req_")
            reply = validate_openai(row["response"]["body"])
            assert reply.choices[0].message.content == "Batched hello."
        errors = await _lines(oa, batch.error_file_id)
        assert errors["b"]["response"]["status_code"] == 500
        assert errors["b"]["response"]["body"]["error"]["type"] == "server_error"
        assert errors["c"]["response"] is None and errors["c"]["error"]["code"] == "server_error"
        output_file = await oa.files.retrieve(batch.output_file_id or "")
        assert output_file.purpose == "batch_output"
        # Listing and paging.
        page = await oa.batches.list(limit=10)
        assert [b.id for b in page.data] == [batch.id]
        files = await oa.files.list()
        assert {f.id for f in files.data} >= {file_id, batch.output_file_id}
        deleted = await oa.files.delete(file_id)
        assert deleted.deleted and deleted.id == file_id
        with pytest.raises(openai.NotFoundError):
            await oa.files.retrieve(file_id)
        stats = sim.stats()
    # 4 lines answered; 2 faults; the HTTP calls are counted apart from the lines.
    assert stats.batch_lines == 4 and stats.faults == 2
    assert stats.by_api == {"openai_batch": stats.batch_calls}
    assert stats.requests == stats.batch_calls


async def test_openai_responses_batch_and_paging(clients: Clients) -> None:
    async with serve() as sim:
        oa = clients.openai(sim)
        ids = []
        for n in range(3):
            file_id = await _upload(oa, [_line(f"r{n}", url="/v1/responses")])
            made = await oa.batches.create(
                input_file_id=file_id, endpoint="/v1/responses", completion_window="24h"
            )
            ids.append(made.id)
        for batch_id in ids:
            batch = await _settle(oa, batch_id)
            assert batch.status == "completed"
            row = (await _lines(oa, batch.output_file_id))[f"r{ids.index(batch_id)}"]
            openai.types.responses.Response.model_validate(row["response"]["body"])
        first = await oa.batches.list(limit=2)
        assert [b.id for b in first.data] == ids[::-1][:2] and first.has_more
        rest = await oa.batches.list(limit=2, after=first.data[-1].id)
        assert [b.id for b in rest.data] == ids[:1] and not rest.has_more
        seen = [b.id async for b in oa.batches.list(limit=1)]
        assert seen == ids[::-1]


async def test_openai_validation_failure_names_lines(clients: Clients) -> None:
    async with serve() as sim:
        oa = clients.openai(sim)
        lines: list[Any] = [
            _line("a"),
            {"method": "POST", "url": "/v1/chat/completions", "body": {}},
            _line("a"),
            _line("x", url="/v1/responses"),
            b"{not json",
        ]
        file_id = await _upload(oa, lines)
        made = await oa.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        batch = await _settle(oa, made.id)
        assert batch.status == "failed" and batch.failed_at
        assert batch.errors is not None and batch.errors.data is not None
        found = {(e.line, e.code, e.param) for e in batch.errors.data}
        assert found == {
            (2, "missing_required_parameter", "custom_id"),
            (3, "duplicate_custom_id", "custom_id"),
            (4, "invalid_url", "url"),
            (5, "invalid_json_line", None),
        }
        assert batch.output_file_id is None and sim.stats().batch_lines == 0
        # Refused at once: an unknown file, an unsupported endpoint.
        with pytest.raises(openai.BadRequestError):
            await oa.batches.create(
                input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h"
            )
        with pytest.raises(openai.BadRequestError):
            await oa.batches.create(
                input_file_id=file_id, endpoint="/v1/embeddings", completion_window="24h"
            )


async def test_openai_cancel(clients: Clients) -> None:
    async with serve() as sim:
        oa = clients.openai(sim)
        file_id = await _upload(oa, [_line(f"l{n}") for n in range(4)])
        made = await oa.batches.create(
            input_file_id=file_id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={"sim_batch_seconds": "60"},
        )
        cancelling = await oa.batches.cancel(made.id)
        assert cancelling.status == "cancelling" and cancelling.cancelling_at
        batch = await _settle(oa, made.id)
        assert batch.status == "cancelled" and batch.cancelled_at
        errors = await _lines(oa, batch.error_file_id)
        assert {row["error"]["code"] for row in errors.values()} == {"batch_cancelled"}
        assert batch.request_counts is not None and batch.request_counts.completed == 0
        with pytest.raises(openai.APIStatusError):
            await oa.batches.cancel(made.id)


async def test_openai_expiry(clients: Clients) -> None:
    async with serve() as sim:
        oa = clients.openai(sim)
        file_id = await _upload(oa, [_line(f"l{n}") for n in range(5)])
        made = await oa.batches.create(
            input_file_id=file_id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={"sim_expire_after": "2"},
        )
        batch = await _settle(oa, made.id)
        assert batch.status == "expired" and batch.expired_at
        assert batch.request_counts is not None
        assert batch.request_counts.model_dump() == {"total": 5, "completed": 2, "failed": 3}
        assert sorted(await _lines(oa, batch.output_file_id)) == ["l0", "l1"]
        errors = await _lines(oa, batch.error_file_id)
        assert {row["error"]["code"] for row in errors.values()} == {"batch_expired"}
        assert all(row["response"] is None for row in errors.values())


def _request(custom_id: str, text: str = "hi") -> dict[str, Any]:
    params = {"model": "c", "max_tokens": 50, "messages": [{"role": "user", "content": text}]}
    return {"custom_id": custom_id, "params": params}


async def _ended(ac: anthropic.AsyncAnthropic, batch_id: str) -> MessageBatch:
    deadline = time.monotonic() + 10.0
    while True:
        batch = await ac.messages.batches.retrieve(batch_id)
        assert_no_extra(batch)
        if batch.processing_status == "ended":
            return batch
        assert time.monotonic() < deadline, f"batch still {batch.processing_status}"
        await asyncio.sleep(0.01)


async def _results(
    ac: anthropic.AsyncAnthropic, batch_id: str
) -> dict[str, MessageBatchIndividualResponse]:
    out = {}
    async for item in await ac.messages.batches.results(batch_id):
        strict = MessageBatchIndividualResponse.model_validate(item.model_dump(), strict=True)
        assert_no_extra(strict)
        out[item.custom_id] = item
    return out


async def test_anthropic_batch_completes(clients: Clients) -> None:
    async with serve(SCRIPT) as sim:
        ac = clients.anthropic(sim)
        reqs = [_request("a"), _request("b", "boom"), _request("c", "garbage"), _request("d")]
        made = await ac.messages.batches.create(requests=reqs)  # type: ignore[arg-type]
        assert made.processing_status == "in_progress" and made.results_url is None
        batch = await _ended(ac, made.id)
        assert batch.ended_at and batch.results_url
        counts = batch.request_counts.model_dump()
        assert counts == {
            "processing": 0,
            "succeeded": 2,
            "errored": 2,
            "canceled": 0,
            "expired": 0,
        }
        results = await _results(ac, made.id)
        assert list(results) == ["a", "b", "c", "d"]
        for key in ("a", "d"):
            result = results[key].result
            assert result.type == "succeeded"
            validate_anthropic(result.message.model_dump(mode="json", exclude_unset=True))
            assert result.message.content[0].type == "text"
        for key in ("b", "c"):
            result = results[key].result
            assert result.type == "errored" and result.error.error.type == "api_error"
        page = await ac.messages.batches.list(limit=5)
        assert [b.id for b in page.data] == [made.id]
        deleted = await ac.messages.batches.delete(made.id)
        assert deleted.id == made.id and deleted.type == "message_batch_deleted"
        with pytest.raises(anthropic.NotFoundError):
            await ac.messages.batches.retrieve(made.id)
        stats = sim.stats()
    assert stats.batch_lines == 4 and stats.requests == stats.batch_calls
    assert stats.by_api == {"anthropic_batch": stats.batch_calls}


async def test_anthropic_refuses_duplicates(clients: Clients) -> None:
    async with serve() as sim:
        ac = clients.anthropic(sim)
        with pytest.raises(anthropic.BadRequestError, match="Duplicate custom_id"):
            await ac.messages.batches.create(requests=[_request("a"), _request("a")])  # type: ignore[list-item]
        assert sim.stats().batch_lines == 0


async def test_anthropic_cancel(clients: Clients) -> None:
    async with serve(batch_seconds=60) as sim:
        ac = clients.anthropic(sim)
        made = await ac.messages.batches.create(requests=[_request("a"), _request("b")])  # type: ignore[list-item]
        with pytest.raises(anthropic.BadRequestError):
            await ac.messages.batches.delete(made.id)
        canceling = await ac.messages.batches.cancel(made.id)
        assert canceling.processing_status == "canceling" and canceling.cancel_initiated_at
        batch = await _ended(ac, made.id)
        assert batch.request_counts.canceled == 2
        results = await _results(ac, made.id)
        assert {r.result.type for r in results.values()} == {"canceled"}


async def test_anthropic_expiry(clients: Clients) -> None:
    async with serve(batch_expire_after=1) as sim:
        ac = clients.anthropic(sim)
        made = await ac.messages.batches.create(requests=[_request("a"), _request("b")])  # type: ignore[list-item]
        batch = await _ended(ac, made.id)
        assert (batch.request_counts.succeeded, batch.request_counts.expired) == (1, 1)
        results = await _results(ac, made.id)
        assert results["a"].result.type == "succeeded" and results["b"].result.type == "expired"

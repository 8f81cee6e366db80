"""The lines raygent sends to the batch APIs, read by the official SDKs' request types:
every request body a run can make (tools, structured output, images, reasoning), as a
line of each API; and the batch create requests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from anthropic.types.messages.batch_create_params import (
    MessageCreateParamsNonStreaming,
)
from anthropic.types.messages.batch_create_params import Request as AnthropicLine
from openai.types import BatchCreateParams
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from pb_support import APIS, model_for
from pydantic import BaseModel, TypeAdapter

from raygent.messages import ImagePart, TextPart, UserMessage
from raygent.models import ModelOptions, ResponseSchema, ToolSpec
from raygent.sim import serve

BODY_TYPES: dict[str, Any] = {
    "chat": CompletionCreateParamsNonStreaming,
    "responses": ResponseCreateParamsNonStreaming,
}
PIXEL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "YPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


class City(BaseModel):
    name: str


OPTIONS = [
    ModelOptions(),
    ModelOptions(
        max_tokens=100,
        tools=[
            ToolSpec(
                name="lookup",
                description="Look up.",
                parameters={"type": "object", "properties": {"q": {"type": "string"}}},
            )
        ],
    ),
    ModelOptions(
        response_schema=ResponseSchema(
            name="City", schema=City.model_json_schema() | {"additionalProperties": False}
        )
    ),
]
MESSAGES = [
    [UserMessage(content="hi")],
    [UserMessage(content=[TextPart(text="what is this?"), ImagePart(url=PIXEL)])],
]


@pytest.mark.local_only("the lines' shapes: no backend involved")
@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("options", OPTIONS, ids=["plain", "tools", "schema"])
@pytest.mark.parametrize("messages", MESSAGES, ids=["text", "image"])
async def test_each_line_is_a_request_the_sdk_types(
    api: str, options: ModelOptions, messages: list[Any]
) -> None:
    async with serve() as sim:
        model = model_for(api, sim)
        batch_api = model.batch_api()
        body = model.request_body(messages, options, stream=False)
        body.pop("stream", None)
        line = json.loads(batch_api.encode("rg-0-a0-t0-abc", json.dumps(body).encode()))
        if api == "anthropic":
            _typed(AnthropicLine, line)
            _typed(MessageCreateParamsNonStreaming, line["params"])
        else:
            assert set(line) == {"custom_id", "method", "url", "body"}
            assert (line["method"], line["url"]) == ("POST", batch_api.endpoint)
            _typed(BODY_TYPES[api], line["body"])
            create = {
                "input_file_id": "file-1",
                "endpoint": batch_api.endpoint,
                "completion_window": "24h",
                "metadata": {"raygent_batch": "rg-x-0"},
            }
            _typed(BatchCreateParams, create)


def _typed(kind: Any, value: dict[str, Any]) -> None:
    """`value` is a `kind` (a TypedDict of the SDK): its fields valid, none unknown."""
    TypeAdapter(kind).validate_python(value)
    known = kind.__required_keys__ | kind.__optional_keys__
    assert set(value) <= known, set(value) - known


@pytest.mark.local_only("the ledger's file: no backend involved")
def test_the_ledger_reads_back_what_a_kill_left_and_goes_on_after_a_cut_line(
    tmp_path: Path,
) -> None:
    from raygent._batch.provider.log import SentBatch, SubmissionLog

    folder = tmp_path / "out.jsonl.provider-batches"
    ledger = SubmissionLog(folder, resume=False)
    sent = SentBatch("rg-j-0", "openai", "http://x/v1", "/v1/chat/completions", ["a", "b"], 1.0)
    ledger.submitting(sent)
    ledger.submitted(sent, "batch_1")
    ledger.ended(sent, "completed", b'{"custom_id": "a"}\n', None)
    ledger.submitting(SentBatch("rg-j-1", "openai", "http://x/v1", "/v1/x", ["c"], 2.0))
    ledger.close()
    log = folder / "batches.jsonl"
    log.write_bytes(log.read_bytes() + b'{"submitted": "rg-j-1", "i')  # the kill, mid-write
    again = SubmissionLog(folder, resume=True)
    assert again.batches["rg-j-0"].results == b'{"custom_id": "a"}\n'
    assert again.batches["rg-j-1"].id is None  # its naming never made it to the disk
    again.submitted(again.batches["rg-j-1"], "batch_2")
    again.close()
    third = SubmissionLog(folder, resume=True)
    assert third.batches["rg-j-1"].id == "batch_2"
    third.close()
    fresh = SubmissionLog(folder, resume=False)
    assert fresh.batches == {}  # a new job starts afresh
    fresh.close()

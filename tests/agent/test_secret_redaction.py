"""A provider that echoes the request's API key in every field and header of every error
shape it can send: no 8 characters of the key reach anything raygent keeps or shows.

Both wires, streamed and not, on both backends; the key is a random 48-character
vLLM-style key (no `sk-` shape for patterns to catch) and an `sk-` one. Outputs searched:
the error (repr, str, `to_dict()`, pickle), the report JSON, the HTML views, the events,
`session.errors()`, the SQLite files, the Redis values, a batch's JSONL sink and result,
OpenTelemetry spans, captured logs, and the model's repr.
"""

from __future__ import annotations

import logging
import pickle
import random
import string
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from agent_support import Recorder
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import raygent
from raygent import AnthropicModel, OpenAIModel
from raygent.errors import ProviderError, ProviderResponseError
from raygent.models._http import HTTPModel
from raygent.sim import Fault, Match, Reply, Rule, serve
from raygent.stores import RedisStore, SQLiteStore

_RANDOM = random.Random(13)
_ALPHABET = string.ascii_letters + string.digits
VLLM_KEY = "".join(_RANDOM.choice(_ALPHABET) for _ in range(48))
SK_KEY = "sk-proj-" + "".join(_RANDOM.choice(_ALPHABET + "_-") for _ in range(40))
SLICE = 8


def error_shapes(key: str) -> dict[str, Fault]:
    """Every error shape, the key in each of its fields and headers (whole, or a part
    as long as a cut would leave: the prefix, the suffix, straddling a length cut)."""
    echo = {
        "type": "error",
        "error": {
            "message": f"Incorrect API key provided: {key}.",
            "type": key,
            "code": key,
            "param": key,
        },
        "request_id": key,
    }
    by_type = {"type": "error", "error": {"type": key[:30], "message": f"key …{key[-20:]}"}}
    return {
        "status-json": Fault(kind="status", status=401, body=echo, headers={"x-request-id": key}),
        # A Retry-After past what the Ray gateway waits for: the 429 comes back at once.
        "status-type": Fault(
            kind="status",
            status=429,
            retry_after=3600,
            body=by_type,
            headers={"request-id": f"req_{key}"},
        ),
        "status-string": Fault(kind="status", status=400, body={"error": f"bad key {key}"}),
        "status-other-json": Fault(kind="status", status=400, body={"detail": "d" * 480 + key}),
        "status-text": Fault(kind="status", status=502, body="<html>" + "x" * 488 + key),
        "stream-event": Fault(
            kind="stream_error", after_chunks=2, body=echo, headers={"x-request-id": key}
        ),
        "stream-unreadable": Fault(kind="stream_error", body="{broken " + "y" * 180 + key),
        "not-json": Fault(kind="not_json", body="<html>" + "z" * 180 + key + "</html>"),
    }


def leaked(blob: str, key: str) -> list[str]:
    """The 8-character slices of `key` found in `blob`."""
    return [key[i : i + SLICE] for i in range(len(key) - SLICE + 1) if key[i : i + SLICE] in blob]


def make_model(wire: str, sim: Any, key: str) -> HTTPModel:
    if wire == "openai":
        return OpenAIModel("sim-gpt", base_url=sim.openai_base_url, api_key=key)
    return AnthropicModel("sim-claude", base_url=sim.anthropic_base_url, api_key=key)


def redis_values(url: str, prefix: str) -> str:
    """Every value under `prefix`, whatever its Redis type, as text."""
    client = redis.Redis.from_url(url)
    out: list[bytes] = []
    try:
        for name in client.scan_iter(match=f"{prefix}*"):
            kind = client.type(name).decode()
            out.append(name)
            if kind == "string":
                out.append(client.get(name) or b"")
            elif kind == "list":
                out += client.lrange(name, 0, -1)
            elif kind == "hash":
                for field, value in client.hgetall(name).items():
                    out += (field, value)
            elif kind == "zset":
                out += [member for member, _ in client.zrange(name, 0, -1, withscores=True)]
            elif kind == "set":
                out += list(client.smembers(name))
            else:
                raise AssertionError(f"{name!r}: a Redis {kind} this test does not read")
            client.delete(name)
    finally:
        client.close()
    return b"\n".join(out).decode("latin-1")


def files_text(*paths: Path) -> str:
    return "\n".join(p.read_bytes().decode("latin-1") for p in paths if p.exists())


def spans_text(exporter: InMemorySpanExporter) -> str:
    parts = []
    for span in exporter.get_finished_spans():
        parts += [span.name, repr(dict(span.attributes or {})), str(span.status.description)]
        parts += [f"{e.name} {dict(e.attributes or {})}" for e in span.events]
    return "\n".join(parts)


@pytest.mark.parametrize("key", [VLLM_KEY, SK_KEY], ids=["vllm-key", "sk-key"])
@pytest.mark.parametrize("wire", ["openai", "anthropic"])
async def test_an_echoed_key_reaches_no_output(
    wire: str, key: str, tmp_path: Path, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    shapes = error_shapes(key)
    # Anchored at the end: a session's failed inputs may reach the provider merged into
    # one user turn, the latest last.
    script = [
        Rule(match=Match(last_user=rf"(^|\s){name}\Z"), reply=Reply(fault=fault))
        for name, fault in shapes.items()
    ]
    exporter = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    db = tmp_path / "sessions.db"
    prefix = f"raygent-secrets-{uuid.uuid4().hex}"
    outputs: list[str] = []
    async with serve(script) as sim:
        model = make_model(wire, sim, key)
        outputs.append(repr(model))
        redis_store = RedisStore(redis_url, prefix=prefix)
        sessions = [
            raygent.agent(
                model=model,
                memory=raygent.Memory(store=store),
                observe=raygent.observers.OpenTelemetry(tracing),
            ).session(f"s-{uuid.uuid4().hex}")
            for store in (SQLiteStore(db), redis_store)
        ]
        for session in sessions:
            for name in shapes:
                for streamed in (False, True):
                    events = Recorder()
                    if streamed:
                        stream = session.stream(name, on={"*": events})
                        async for event in stream:
                            outputs.append(repr(event))
                        result = await stream.result
                    else:
                        result = await session.execute(name, on={"*": events})
                    error = result.error
                    assert isinstance(error, ProviderError), (name, streamed, result.status)
                    if name in ("stream-unreadable", "not-json") and streamed:
                        assert isinstance(error, ProviderResponseError)
                    outputs += [repr(error), str(error), repr(error.to_dict())]
                    outputs.append(pickle.dumps(error).decode("latin-1"))
                    outputs += [result.report.to_json(), result._repr_html_()]
                    outputs += [result.report._repr_html_(), repr(events.events)]
            outputs.append(repr(await session.errors()))
        sink = tmp_path / "out.jsonl"
        batch = await raygent.batch(
            raygent.agent(model=model),
            list(shapes),
            sink=str(sink),
            retry=raygent.Retry(attempts=1),
            progress=False,
            check=False,  # every shape through the sink: the job is not stopped at its 401
        )
        await redis_store.aclose()
    assert batch.report.failed == len(shapes)
    outputs += [repr(batch), batch._repr_html_(), files_text(sink)]
    outputs += [repr(item.error and item.error.to_dict()) for item in batch.items]
    outputs.append(files_text(db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")))
    outputs.append(redis_values(redis_url, prefix))
    outputs.append(spans_text(exporter))
    outputs.append(caplog.text)
    blob = "\n".join(outputs)
    assert "***" in blob  # the echoes arrived, and were masked
    assert leaked(blob, key) == []

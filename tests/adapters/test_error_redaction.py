"""Redaction at the source and its registry: a provider's reply is redacted whole before
it is cut, runs of a key are masked, and the registry of known keys holds the keys of
live adapters only and shows none of them."""

from __future__ import annotations

import gc
import logging
import pickle
import time
from pathlib import Path

import pytest

import raygent
from raygent import OpenAIModel
from raygent.errors import ServerError, redact
from raygent.models._errors import (
    error_from_response,
    error_from_stream_event,
    parse_error_body,
    read_error_body,
)
from raygent.redaction import _KNOWN
from raygent.stores import Scope, SQLiteStore
from raygent.testing import ScriptedModel, reply

KEY = "Zq8vN3xLp0Tw7RkYb2HcM9sJd4FgA6uE1iOoWnVtQyXrSlPk"  # 48 characters, no `sk-`


def slices(text: str, key: str = KEY) -> list[str]:
    return [key[i : i + 8] for i in range(len(key) - 7) if key[i : i + 8] in text]


@pytest.mark.parametrize(
    "body",
    [
        b"x" * 495 + KEY.encode(),  # a raw body: cut at 500
        b'{"detail": "' + b"d" * 483 + KEY.encode() + b'"}',  # JSON without `error`: 500
        b'{"error": {"message": "' + b"m" * 1995 + KEY.encode() + b'"}}',  # message: 2000
    ],
    ids=["raw", "other-json", "message"],
)
def test_an_error_body_is_redacted_before_it_is_cut(body: bytes) -> None:
    said = read_error_body(parse_error_body(body))
    headers = {"x-request-id": "req_" + KEY}
    error = error_from_response(502, headers, said, provider="openai", secrets=(KEY,))
    assert KEY[:4] not in error.message  # cut first, the key's first characters stayed
    assert error.request_id == "req_***"


def test_every_field_of_a_stream_error_event_is_redacted() -> None:
    event = {"type": "error", "error": {"type": KEY[:20], "message": f"no {KEY[-10:]}"}}
    error = error_from_stream_event(event, provider="anthropic", secrets=(KEY,))
    assert isinstance(error, ServerError)
    assert error.provider_code == "***" and slices(repr(error.to_dict()), KEY) == []


def test_redact_masks_runs_of_a_secret_not_shorter_pieces() -> None:
    text = f"a {KEY[:8]} b {KEY[10:30]} c {KEY[-9:]} d {KEY[:7]} e"
    assert redact(text, (KEY,)) == f"a *** b *** c *** d {KEY[:7]} e"
    assert redact("a task-runner failed", ()) == "a task-runner failed"
    assert redact("key sk-abcdef12 here") == "key *** here"


def test_redact_is_linear_in_the_text() -> None:
    small, big = "x" * 200_000 + KEY, "x" * 2_000_000 + KEY
    started = time.perf_counter()
    redact(small, (KEY,))
    small_took = time.perf_counter() - started
    started = time.perf_counter()
    assert redact(big, (KEY,)).endswith("x***")
    # Ten times the text: about ten times the time (quadratic would be a hundred).
    assert time.perf_counter() - started < 40 * small_took + 0.5


def test_the_registry_knows_a_live_model_key_and_forgets_it_after() -> None:
    model = OpenAIModel("m", base_url="http://127.0.0.1:1/v1", api_key=KEY)
    assert KEY in _KNOWN
    error = ServerError(f"the gateway said {KEY[5:25]}", request_id=KEY, nested={"k": [KEY]})
    assert slices(repr(error) + repr(error.to_dict()) + str(pickle.dumps(error))) == []
    assert slices(repr(_KNOWN) + repr(model)) == []
    with pytest.raises(TypeError):
        pickle.dumps(_KNOWN)
    copy = pickle.loads(pickle.dumps(model))  # as a Ray worker gets it
    del model
    gc.collect()
    assert KEY in _KNOWN  # the copy still holds it
    del copy
    gc.collect()
    assert KEY not in _KNOWN and not _KNOWN.grams


class _Opaque:
    def __str__(self) -> str:
        return f"opaque {KEY}"


async def test_errors_that_are_not_raygent_errors_are_redacted_in_sinks_and_stores(
    tmp_path: Path,
) -> None:
    model = OpenAIModel("m", base_url="http://127.0.0.1:1/v1", api_key=KEY)

    async def leaky(item: str) -> str:
        raise RuntimeError(f"the gateway refused {KEY[3:30]}")

    sink = tmp_path / "out.jsonl"
    batch = await raygent.batch(leaky, ["a"], sink=str(sink), progress=False)
    store = SQLiteStore(tmp_path / "s.db")
    scope = Scope(session_id="s")
    await store.record_error(scope, "run-1", {"message": "x", "detail": _Opaque()}, [])
    records = await store.errors(scope)
    assert batch.report.failed == 1
    assert slices(sink.read_text() + repr(records)) == []
    assert repr(model)  # the key stays registered while the test looks


async def test_log_lines_and_their_tracebacks_show_no_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An observer's own exception (not raygent's, never redacted on its way) is logged
    by raygent: the line and the traceback have the live key masked."""
    model = OpenAIModel("m", base_url="http://127.0.0.1:1/v1", api_key=KEY)

    def leaky(report: raygent.AgentReport) -> None:
        raise RuntimeError(f"could not post with key {KEY}")

    bot = raygent.agent(model=ScriptedModel([reply("hi")]))
    with caplog.at_level(logging.WARNING, logger="raygent.observers"):
        result = await bot.execute("q", observe=leaky)
    assert result.error is None
    assert caplog.records, "the observer's failure is logged"
    assert "could not post with key ***" in caplog.text
    assert not slices(caplog.text)
    assert not slices(logging.Formatter().format(caplog.records[0]))
    del model

"""Helpers for the simulator tests: SDK clients, strict response checks, polling."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
from anthropic.types import RawMessageStreamEvent
from pydantic import BaseModel, TypeAdapter

from raygent.sim import SimStats, Simulator

EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)


class Clients:
    """Creates SDK and httpx clients for a simulator and closes them all at teardown."""

    def __init__(self) -> None:
        self._open: list[Any] = []

    def openai(self, sim: Simulator, **kwargs: Any) -> openai.AsyncOpenAI:
        kwargs.setdefault("api_key", "sk-test")
        client = openai.AsyncOpenAI(base_url=sim.openai_base_url, max_retries=0, **kwargs)
        self._open.append(client)
        return client

    def anthropic(self, sim: Simulator, **kwargs: Any) -> anthropic.AsyncAnthropic:
        kwargs.setdefault("api_key", "sk-ant-test")
        client = anthropic.AsyncAnthropic(base_url=sim.anthropic_base_url, max_retries=0, **kwargs)
        self._open.append(client)
        return client

    def http(self, sim: Simulator, **kwargs: Any) -> httpx.AsyncClient:
        client = httpx.AsyncClient(base_url=sim.url, **kwargs)
        self._open.append(client)
        return client

    async def aclose(self) -> None:
        for client in self._open:
            await (client.aclose() if isinstance(client, httpx.AsyncClient) else client.close())


def assert_no_extra(model: BaseModel, path: str = "") -> None:
    """The SDK models accept unknown fields; a field the SDK does not know means the
    simulator misspelled or invented it."""
    extra = model.model_extra or {}
    assert not extra, f"unknown fields at {path or 'top'}: {sorted(extra)}"
    for name in type(model).model_fields:
        _check_value(getattr(model, name), f"{path}.{name}")


def _check_value(value: Any, path: str) -> None:
    if isinstance(value, BaseModel):
        assert_no_extra(value, path)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_value(item, f"{path}[{i}]")


def validate_openai(body: dict[str, Any]) -> openai.types.chat.ChatCompletion:
    parsed = openai.types.chat.ChatCompletion.model_validate(body, strict=True)
    assert_no_extra(parsed)
    return parsed


def validate_anthropic(body: dict[str, Any]) -> anthropic.types.Message:
    parsed = anthropic.types.Message.model_validate(body, strict=True)
    assert_no_extra(parsed)
    return parsed


def openai_chunks(raw: str) -> list[openai.types.chat.ChatCompletionChunk]:
    """Parse and strictly validate an OpenAI SSE body; it must end with ``[DONE]``."""
    datas = [line[6:] for line in raw.split("\n") if line.startswith("data: ")]
    assert datas[-1] == "[DONE]"
    chunks = []
    for data in datas[:-1]:
        chunk = openai.types.chat.ChatCompletionChunk.model_validate_json(data, strict=True)
        assert_no_extra(chunk)
        chunks.append(chunk)
    return chunks


def anthropic_events(raw: str) -> list[Any]:
    """Parse and strictly validate an Anthropic SSE body (``event:`` names included)."""
    events = []
    for block in raw.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        if lines["event"] == "ping":
            continue
        event = EVENT_ADAPTER.validate_json(lines["data"], strict=True)
        assert event.type == lines["event"]
        assert_no_extra(event)
        events.append(event)
    return events


async def wait_for(
    sim: Simulator, predicate: Callable[[SimStats], bool], timeout: float = 10.0
) -> SimStats:
    """Wait (bounded) until the simulator's stats satisfy `predicate`."""
    return await sim.wait_until(predicate, timeout)


USER = [{"role": "user", "content": "Hello there, simulator!"}]

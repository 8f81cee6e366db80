"""Anthropic Messages API."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from typing import Any

import httpx
import pydantic_core
from typing_extensions import Unpack

from .._message_input import MessageLike, given_messages
from ..abort import AbortSignal
from ..usage import Usage
from . import _anthropic_wire as wire
from ._http import MALFORMED, HTTPModel, ModelSettings, text_field
from .batch_api import AnthropicBatchAPI, BatchAPI
from .contract import (
    Capabilities,
    Done,
    ModelOptions,
    ModelResponse,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
)

__all__ = ["AnthropicModel"]

_THINKING_MODELS = re.compile(r"claude-(3-7|(opus|sonnet|haiku)-4|4)")
_NO_OPTIONS = ModelOptions()


class AnthropicModel(HTTPModel):
    """A Claude model over the Messages API.

    `base_url` is what the official SDK takes (no `/v1`). The key comes from `api_key` or
    `ANTHROPIC_API_KEY`. `default_max_tokens` is sent when a request gives none (the API
    requires one).
    """

    provider = "anthropic"
    env_key = "ANTHROPIC_API_KEY"
    default_base_url = "https://api.anthropic.com"

    def __init__(
        self, name: str, *, default_max_tokens: int = 4096, **settings: Unpack[ModelSettings]
    ) -> None:
        super().__init__(name, **settings)
        self.default_max_tokens = default_max_tokens

    @classmethod
    def default_capabilities(cls, name: str) -> Capabilities:
        # The Messages API of the current SDK declares no `temperature`; pass
        # `Capabilities(temperature=True, ...)` for an older model that takes one.
        return Capabilities(
            structured_output=False,
            reasoning=bool(_THINKING_MODELS.search(name)),
            prompt_caching=True,
            temperature=False,
        )

    def _auth_headers(self) -> dict[str, str]:
        headers = {"anthropic-version": wire.API_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def request_body(
        self, messages: Sequence[MessageLike], options: ModelOptions | None, *, stream: bool
    ) -> dict[str, Any]:
        """The JSON body this adapter sends (public so tests can check it against the SDK)."""
        return wire.request_body(
            self.name,
            given_messages(messages),
            options or _NO_OPTIONS,
            self.capabilities,
            stream=stream,
            default_max_tokens=self.default_max_tokens,
        )

    async def complete(
        self,
        messages: Sequence[MessageLike],
        options: ModelOptions | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> ModelResponse:
        body = self.request_body(messages, options, stream=False)
        data, response = await self._post_json("/v1/messages", body, signal)
        return self._rated(self._reply(data, response), response)

    def batch_api(self) -> BatchAPI | None:
        """Anthropic's Message Batches API for this model's requests."""
        return AnthropicBatchAPI(self)

    def batch_reply(self, data: dict[str, Any]) -> ModelResponse:
        """A batch line's message, read as `complete` reads one, priced at batch rates."""
        return self._reply(data, None, batch=True)

    def _reply(
        self, data: dict[str, Any], response: httpx.Response | None, *, batch: bool = False
    ) -> ModelResponse:
        try:
            content, calls = wire.content_from(data["content"])
            usage = wire.usage_from(data.get("usage"))
            return self._response(content, calls, data.get("stop_reason"), data, usage, batch)
        except MALFORMED:
            raw = json.dumps(data).encode()
            raise self._bad_reply(response, "malformed message", raw) from None

    async def count_tokens(
        self,
        messages: Sequence[MessageLike],
        options: ModelOptions | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> int:
        """Input tokens of a request, counted by the provider (no generation, no cost)."""
        body = self.request_body(messages, options, stream=False)
        for key in ("max_tokens", "stream", "temperature", "metadata"):
            body.pop(key, None)
        data, response = await self._post_json("/v1/messages/count_tokens", body, signal)
        tokens = data.get("input_tokens")
        if not isinstance(tokens, int):
            raise self._bad_reply(response, "count_tokens reply without input_tokens")
        return tokens

    def _response(
        self,
        content: Any,
        calls: Any,
        stop_reason: str | None,
        data: Mapping[str, Any],
        usage: Usage,
        batch: bool = False,
    ) -> ModelResponse:
        finish = wire.finish_reason(stop_reason)
        return ModelResponse(
            content=content,
            tool_calls=calls,
            finish_reason=finish,
            usage=self._priced(usage, batch=batch),
            response_id=data.get("id"),
            model=data.get("model"),
            provider=self.provider,
            refusal="refused" if finish == "refusal" else None,
        )

    async def stream(
        self,
        messages: Sequence[MessageLike],
        options: ModelOptions | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> AsyncIterator[StreamChunk]:
        body = self.request_body(messages, options, stream=True)
        state = wire.StreamState()
        async with (
            self._post("/v1/messages", body, signal) as response,
            aclosing(self._events(response, signal)) as events,
        ):
            async for event in events:
                try:
                    data = pydantic_core.from_json(event.data) if event.data else {}
                    if not isinstance(data, dict):
                        raise TypeError("an event that is not a JSON object")
                    kind = data.get("type") or event.event or ""
                    if kind == "error":
                        raise self._stream_error(data)
                    outs = self._feed(state, kind, data)
                except MALFORMED:
                    raise self._bad_reply(
                        response, "malformed stream event", event.data.encode()
                    ) from None
                for out in outs:
                    yield out
                if state.stopped:
                    break
        if not state.stopped:
            raise self._bad_reply(None, "the stream ended before the reply was complete")
        try:
            content, calls = wire.content_from(state.finished_blocks())
            meta = {"id": state.response_id, "model": state.model}
            usage = state.usage or Usage()
            done = self._response(content, calls, state.stop_reason, meta, usage)
        except MALFORMED:
            raise self._bad_reply(None, "malformed content blocks in the stream") from None
        yield Done(self._rated(done, response))

    def _feed(self, state: wire.StreamState, kind: str, data: dict[str, Any]) -> list[StreamChunk]:
        if kind == "message_start":
            message = data["message"]
            state.response_id, state.model = message.get("id"), message.get("model")
            state.usage = wire.usage_from(message.get("usage"))
            return []
        if kind == "content_block_start":
            block = data["content_block"]
            if not isinstance(block, dict) or not isinstance(block["type"], str):
                raise TypeError("a content block is not an object with a type")
            state.blocks[data["index"]] = dict(block)
            return []
        if kind == "content_block_delta":
            return self._delta(state, data["index"], data["delta"])
        if kind == "message_delta":
            state.stop_reason = data.get("delta", {}).get("stop_reason") or state.stop_reason
            state.usage = wire.usage_from(data.get("usage"), state.usage)
            return [UsageChunk(self._priced(state.usage))]
        if kind == "message_stop":
            state.stopped = True
        return []

    def _delta(
        self, state: wire.StreamState, index: int, delta: dict[str, Any]
    ) -> list[StreamChunk]:
        block = state.blocks[index]
        kind = delta["type"]
        if kind == "text_delta":
            text = text_field(delta["text"])
            block["text"] = block.get("text", "") + text
            return [TextDelta(text)]
        if kind == "input_json_delta":
            # Client tool_use, and server-side tool blocks (server_tool_use, mcp_tool_use):
            # each is rebuilt with its input; only a client's call is a ToolCallDelta.
            fragment = text_field(delta["partial_json"])
            state.partial_json.setdefault(index, []).append(fragment)
            if block["type"] != "tool_use":
                return []
            call_id, name = text_field(block["id"]), text_field(block["name"])
            return [ToolCallDelta(index, call_id, name, fragment)]
        if kind == "citations_delta":
            citation = delta["citation"]
            if not isinstance(citation, dict):
                raise TypeError("a citation is not an object")
            block["citations"] = [*(block.get("citations") or ()), citation]
            return []
        if kind == "thinking_delta":
            text = text_field(delta["thinking"])
            block["thinking"] = block.get("thinking", "") + text
            return [ReasoningDelta(text)]
        if kind == "signature_delta":
            block["signature"] = block.get("signature", "") + text_field(delta["signature"])
        return []

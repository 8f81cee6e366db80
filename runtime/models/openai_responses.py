"""The OpenAI Responses API (`/v1/responses`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import httpx
import pydantic_core
from typing_extensions import Unpack

from .._message_input import MessageLike, given_messages
from ..abort import AbortSignal
from ..errors import ProviderError
from . import _responses_wire as wire
from ._http import MALFORMED, HTTPModel, text_field
from .batch_api import BatchAPI, OpenAIBatchAPI
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
from .openai import OpenAIModel
from .tiers import OpenAISettings, openai_options, served_tier, tier_fallback, with_refusals

if TYPE_CHECKING:
    from ._http import ModelSettings

__all__ = ["OpenAIResponsesModel"]

_FINAL_EVENTS = ("response.completed", "response.incomplete")
# Events whose content the final response object carries too: named by their SSE
# `event:` line, they are not parsed at all (a reply streams ~10 events, most of these).
_SKIPPED = frozenset(
    {
        "response.created",
        "response.in_progress",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_text.done",
        "response.output_item.done",
        "response.refusal.delta",
        "response.refusal.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.done",
        "response.function_call_arguments.done",
        # Built-in tools (kept whole, as provider blocks, from the final response) and
        # the text's annotations: never a client tool call, never text.
        "response.output_text.annotation.added",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.file_search_call.completed",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
        "response.mcp_call.failed",
        "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call_code.delta",
        "response.code_interpreter_call_code.done",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed",
    }
)


@dataclass
class _Stream:
    calls: dict[int, tuple[str, str]] = field(default_factory=dict)  # output index: id, name
    final: dict[str, Any] | None = None


class OpenAIResponsesModel(HTTPModel):
    """A model over the OpenAI Responses API.

    `base_url` is what the official SDK takes (ends in `/v1`); the key comes from
    `api_key` or `OPENAI_API_KEY`. With `store=False` (the default) nothing is kept by
    OpenAI: a reasoning model's reasoning comes back encrypted
    (`include=["reasoning.encrypted_content"]`) as opaque provider blocks, replayed
    verbatim on the next trip. Capabilities are inferred from the name as for
    `OpenAIModel`. `ModelOptions.provider_options["openai_responses"]` is merged into
    the request body. `service_tier`, `prompt_cache_key` and `prompt_cache_retention`:
    see `OpenAISettings`.
    """

    provider = "openai"
    env_key = "OPENAI_API_KEY"
    default_base_url = "https://api.openai.com/v1"
    settings_type = OpenAISettings

    def __init__(
        self, name: str, *, store: bool = False, **settings: Unpack[OpenAISettings]
    ) -> None:
        super().__init__(name, **cast("ModelSettings", settings))  # checked there in full
        self.store = store
        self.service_tier = settings.get("service_tier")
        self.prompt_cache_key = settings.get("prompt_cache_key")
        self.prompt_cache_retention = settings.get("prompt_cache_retention")

    @classmethod
    def default_capabilities(cls, name: str) -> Capabilities:
        return OpenAIModel.default_capabilities(name)

    def _auth_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def request_body(
        self, messages: Sequence[MessageLike], options: ModelOptions | None, *, stream: bool
    ) -> dict[str, Any]:
        """The JSON body this adapter sends (public so tests can check it against the SDK)."""
        return wire.request_body(
            self.name,
            given_messages(messages),
            openai_options(self, options),
            self.capabilities,
            stream=stream,
            store=self.store,
        )

    async def complete(
        self,
        messages: Sequence[MessageLike],
        options: ModelOptions | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> ModelResponse:
        options = openai_options(self, options)
        body = self.request_body(messages, options, stream=False)
        fallback = tier_fallback(options, None, self.name, self.provider)
        data, response = await self._post_json("/responses", body, signal, fallback=fallback)
        return with_refusals(self._rated(self._reply(data, response), response), fallback)

    def batch_api(self) -> BatchAPI | None:
        if not self.base_url.endswith("/v1"):
            return None
        return OpenAIBatchAPI(self, "/v1/responses")

    def batch_reply(self, data: dict[str, Any]) -> ModelResponse:
        """A batch line's response body, read as `complete` reads one, at batch rates."""
        return self._reply(data, None, batch=True)

    def _reply(
        self, data: dict[str, Any], response: httpx.Response | None, *, batch: bool = False
    ) -> ModelResponse:
        if data.get("status") == "failed":
            raise self._failed(data)
        try:
            return self._response(data, batch=batch)
        except MALFORMED:
            raw = json.dumps(data).encode()
            raise self._bad_reply(response, "malformed response", raw) from None

    def _response(self, data: dict[str, Any], *, batch: bool = False) -> ModelResponse:
        reply = wire.parse_response(data)
        tier = served_tier(data.get("service_tier"))
        return ModelResponse(
            content=reply.content,
            tool_calls=reply.tool_calls,
            finish_reason=reply.finish_reason,
            usage=self._priced(reply.usage, batch=batch, tier=tier),
            response_id=data.get("id"),
            model=data.get("model"),
            provider=self.provider,
            refusal=reply.refusal,
            service_tier=tier,
        )

    def _failed(self, data: dict[str, Any]) -> ProviderError:
        error = data.get("error")
        return self._stream_error({"error": error if isinstance(error, dict) else {}})

    async def stream(
        self,
        messages: Sequence[MessageLike],
        options: ModelOptions | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> AsyncIterator[StreamChunk]:
        options = openai_options(self, options)
        body = self.request_body(messages, options, stream=True)
        fallback = tier_fallback(options, None, self.name, self.provider)
        state = _Stream()
        async with (
            self._post("/responses", body, signal, fallback=fallback) as response,
            aclosing(self._events(response, signal)) as events,
        ):
            async for event in events:
                if event.event in _SKIPPED:
                    continue
                try:
                    data = pydantic_core.from_json(event.data) if event.data else {}
                    if not isinstance(data, dict):
                        raise TypeError("an event that is not a JSON object")
                    outs = self._feed(state, data.get("type") or event.event or "", data)
                except MALFORMED:
                    raise self._bad_reply(
                        response, "malformed stream event", event.data.encode()
                    ) from None
                for out in outs:
                    yield out
                if state.final is not None:
                    break
        if state.final is None:
            raise self._bad_reply(None, "the stream ended before the reply was complete")
        try:
            done = self._response(state.final)
        except MALFORMED:
            raise self._bad_reply(None, "malformed response in the stream") from None
        yield UsageChunk(done.usage)
        yield Done(with_refusals(self._rated(done, response), fallback))

    def _feed(self, state: _Stream, kind: str, data: dict[str, Any]) -> list[StreamChunk]:
        if kind == "response.output_text.delta":
            return [TextDelta(text_field(data["delta"]))]
        if kind == "response.function_call_arguments.delta":
            index = data["output_index"]
            call_id, name = state.calls[index]
            return [ToolCallDelta(index, call_id, name, text_field(data["delta"]))]
        if kind == "response.reasoning_summary_text.delta":
            return [ReasoningDelta(text_field(data["delta"]))]
        if kind == "response.output_item.added":
            item = data["item"]
            if item["type"] == "function_call":
                index = data["output_index"]
                if not isinstance(index, int):
                    raise TypeError("an output index that is not an integer")
                call = (text_field(item["call_id"]), text_field(item["name"]))
                state.calls[index] = call
        elif kind in _FINAL_EVENTS:
            final = data["response"]
            if not isinstance(final, dict):
                raise TypeError("a final response that is not an object")
            state.final = final
        elif kind == "response.failed":
            raise self._failed(data["response"])
        elif kind == "error":
            error = data.get("error") if isinstance(data.get("error"), dict) else data
            raise self._stream_error({"error": error})
        return []

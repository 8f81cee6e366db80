"""OpenAI Chat Completions, and any OpenAI-compatible server (vLLM, Ollama, LM Studio)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, cast

import httpx
import pydantic_core
from typing_extensions import Unpack

from .._message_input import MessageLike, given_messages
from ..abort import AbortSignal
from ..usage import Usage
from . import _openai_wire as wire
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
from .tiers import OpenAISettings, openai_options, served_tier, tier_fallback, with_refusals

if TYPE_CHECKING:
    from ._http import ModelSettings

__all__ = ["OpenAIModel"]

_REASONING_MODELS = re.compile(r"^(o\d|gpt-5)")
# Chat models that take no images; every other name is assumed to (gpt-4o, gpt-4.1,
# gpt-4-turbo, o1, o3, o4-mini, gpt-5 and unknown local models).
_TEXT_ONLY_MODELS = re.compile(
    r"^(?:gpt-3\.5|gpt-4(?:-32k)?(?:-\d{4})?$|gpt-4-(?:1106|0125)-preview|gpt-4-turbo-preview"
    r"|o1-mini|o1-preview|o3-mini|gpt-oss|text-|davinci|babbage|curie|ada(?:$|-))"
)


class OpenAIModel(HTTPModel):
    """A Chat Completions model.

    `base_url` is what the official SDK takes (ends in `/v1`). The key comes from
    `api_key` or `OPENAI_API_KEY`. `max_tokens_field` is `max_completion_tokens` on
    api.openai.com and `max_tokens` elsewhere, unless given. `vision` is inferred from
    the name (text-only: gpt-3.5, gpt-4 base, o1-mini, o1-preview, o3-mini, ...); an
    explicit `vision=` wins, over `capabilities=` too. `service_tier`,
    `prompt_cache_key` and `prompt_cache_retention`: see `OpenAISettings`.
    """

    provider = "openai"
    env_key = "OPENAI_API_KEY"
    default_base_url = "https://api.openai.com/v1"
    settings_type = OpenAISettings

    def __init__(
        self,
        name: str,
        *,
        max_tokens_field: str | None = None,
        vision: bool | None = None,
        **settings: Unpack[OpenAISettings],
    ) -> None:
        super().__init__(name, **cast("ModelSettings", settings))  # checked there in full
        self.service_tier = settings.get("service_tier")
        self.prompt_cache_key = settings.get("prompt_cache_key")
        self.prompt_cache_retention = settings.get("prompt_cache_retention")
        if vision is not None:
            self.capabilities = self.capabilities.model_copy(update={"vision": vision})
        if max_tokens_field is None:
            official = "api.openai.com" in self.base_url
            max_tokens_field = "max_completion_tokens" if official else "max_tokens"
        self.max_tokens_field = max_tokens_field

    @classmethod
    def default_capabilities(cls, name: str) -> Capabilities:
        bare = name.rsplit("/", 1)[-1].removeprefix("ft:")  # "openai/gpt-4o", "ft:gpt-3.5-..."
        return Capabilities(
            reasoning=bool(_REASONING_MODELS.match(name)),
            prompt_caching=True,
            vision=not _TEXT_ONLY_MODELS.match(bare),
        )

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
            max_tokens_field=self.max_tokens_field,
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
        data, response = await self._post_json("/chat/completions", body, signal, fallback=fallback)
        return with_refusals(self._rated(self._reply(data, response), response), fallback)

    def batch_api(self) -> BatchAPI | None:
        """The OpenAI Batch API for this model's requests (None where its base URL is
        not an OpenAI-style `/v1` root: no batch endpoint to name). Every reply shape
        `complete` reads, a batch line's reply is read as (`batch_reply`)."""
        if not self.base_url.endswith("/v1"):
            return None
        return OpenAIBatchAPI(self, "/v1/chat/completions")

    def batch_reply(self, data: dict[str, Any]) -> ModelResponse:
        """A batch line's reply body, read as `complete` reads one, priced at batch rates."""
        return self._reply(data, None, batch=True)

    def _reply(
        self, data: dict[str, Any], response: httpx.Response | None, *, batch: bool = False
    ) -> ModelResponse:
        try:
            reply = wire.parse_choice(data["choices"][0])
            state = wire.StreamState(text=[reply.text], reasoning=[reply.reasoning])
            tier = served_tier(data.get("service_tier"))
            return ModelResponse(
                content=state.content(),
                tool_calls=reply.tool_calls,
                finish_reason=reply.finish_reason,
                usage=self._priced(wire.usage_from(data.get("usage")), batch=batch, tier=tier),
                response_id=data.get("id"),
                model=data.get("model"),
                provider=self.provider,
                refusal=reply.refusal,
                service_tier=tier,
            )
        except MALFORMED:
            raw = json.dumps(data).encode()
            raise self._bad_reply(response, "malformed chat completion", raw) from None

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
        state = wire.StreamState()
        done = False
        async with (
            self._post("/chat/completions", body, signal, fallback=fallback) as response,
            aclosing(self._events(response, signal)) as events,
        ):
            async for event in events:
                if event.data.strip() == "[DONE]":
                    done = True
                    break
                try:
                    chunk = pydantic_core.from_json(event.data)
                    if not isinstance(chunk, dict):
                        raise TypeError("a chunk that is not a JSON object")
                    if chunk.get("error") is not None:
                        raise self._stream_error(chunk)
                    outs = self._feed(state, chunk)
                except MALFORMED:
                    raise self._bad_reply(
                        response, "malformed stream chunk", event.data.encode()
                    ) from None
                for out in outs:
                    yield out
        if not done and state.finish is None:
            raise self._bad_reply(None, "the stream ended before the reply was complete")
        try:
            refusal = "".join(state.refusal) or None
            whole = ModelResponse(
                content=state.content(),
                tool_calls=state.tool_calls(),
                finish_reason=wire.finish_reason(state.finish, refusal),
                usage=self._priced(state.usage or Usage(requests=1), tier=state.service_tier),
                response_id=state.response_id,
                model=state.model,
                provider=self.provider,
                refusal=refusal,
                service_tier=state.service_tier,
            )
        except MALFORMED:
            raise self._bad_reply(None, "malformed chunks in the stream") from None
        yield Done(with_refusals(self._rated(whole, response), fallback))

    def _feed(self, state: wire.StreamState, chunk: dict[str, Any]) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        state.response_id = state.response_id or chunk.get("id")
        state.model = state.model or chunk.get("model")
        state.service_tier = served_tier(chunk.get("service_tier")) or state.service_tier
        if chunk.get("usage"):
            state.usage = wire.usage_from(chunk["usage"])
            out.append(UsageChunk(self._priced(state.usage, tier=state.service_tier)))
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            text, reasoning = wire.content_parts(delta.get("content"))
            reasoning = wire.reasoning_field(delta) + reasoning
            if reasoning:
                state.reasoning.append(reasoning)
                out.append(ReasoningDelta(reasoning))
            if text:
                state.text.append(text)
                out.append(TextDelta(text))
            if delta.get("refusal"):
                state.refusal.append(text_field(delta["refusal"]))
            for call in delta.get("tool_calls") or ():
                index = call["index"]
                if not isinstance(index, int):
                    raise TypeError("a tool call index that is not an integer")
                pending = state.calls.setdefault(index, wire.PendingCall())
                function = call.get("function") or {}
                pending.call_id = text_field(call.get("id") or pending.call_id)
                pending.name = text_field(function.get("name") or pending.name)
                fragment = text_field(function.get("arguments") or "")
                pending.arguments.append(fragment)
                out.append(ToolCallDelta(index, pending.call_id, pending.name, fragment))
            if choice.get("finish_reason"):
                state.finish = text_field(choice["finish_reason"])
        return out

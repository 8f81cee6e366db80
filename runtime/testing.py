"""In-process test doubles for the `Model` protocol: no HTTP, deterministic, fast.

`ScriptedModel` plays a list of steps, one per request; `FunctionModel` asks a function
for the step of every request. A step is one of:

- a `str`: a text reply (finish "stop");
- a `ModelResponse`: returned as is;
- `reply(...)`: text, tool calls (`call(...)`), provider blocks, reasoning, usage;
- an exception (instance or class): raised by that request;
- `hang()`: never answers, until the abort signal fires or the task is cancelled;
- a callable `(messages, options) -> step` (sync or async), resolved in turn.

Streaming yields the same reply as chunks, ending with `Done(response)` equal to what
`complete()` returns. Usage counts ~4 characters a token; cost is set only when the
model's pricing is known (pass `pricing=`).

For flows: `mock_router([...])` replays a supervisor's routing decisions, and the pytest
style assertions `assert_routes_to`, `assert_converges`, `assert_step_passed` and
`assert_output_shape` fail with the report path that broke (see `raygent.flows.testing`).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from ._message_input import MessageLike, as_messages
from .abort import AbortSignal, abortable
from .flows.testing import (
    MockRouter,
    assert_converges,
    assert_output_shape,
    assert_routes_to,
    assert_step_passed,
    failure_path,
    mock_router,
)
from .messages import ContentPart, Message, ProviderBlock, TextPart, ToolCall
from .models.contract import (
    Capabilities,
    Done,
    FinishReason,
    ModelOptions,
    ModelResponse,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
)
from .pricing import Pricing, price_usage
from .usage import Usage

__all__ = [
    "FunctionModel",
    "Hang",
    "MockRouter",
    "Reply",
    "ScriptExhausted",
    "ScriptedCall",
    "ScriptedModel",
    "Step",
    "assert_converges",
    "assert_output_shape",
    "assert_routes_to",
    "assert_step_passed",
    "call",
    "failure_path",
    "hang",
    "mock_router",
    "reply",
]

ALL_CAPABILITIES = Capabilities(
    tools=True,
    structured_output=True,
    vision=True,
    reasoning=True,
    prompt_caching=True,
    temperature=True,
    server_compaction=True,  # test models take the option (and may reply with a block)
)
_NO_OPTIONS = ModelOptions()
_CHARS_PER_TOKEN = 4
_PIECES = 3  # how many deltas a text or argument string is streamed in


class ScriptExhausted(RuntimeError):
    """A ScriptedModel got a request after its last step."""


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    """A tool call in a scripted reply; `call_id` None gets `call_1`, `call_2`, …"""

    name: str
    arguments_text: str
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    """A scripted reply; build it with `reply()`."""

    text: str | None = None
    tool_calls: tuple[ScriptedCall | ToolCall, ...] = ()
    finish: FinishReason | None = None
    blocks: tuple[ProviderBlock, ...] = ()
    reasoning: str | None = None
    usage: Usage | None = None


@dataclass(frozen=True, slots=True)
class Hang:
    """A step that never answers; see `hang()`."""


Step: TypeAlias = (
    "str | ModelResponse | Reply | Hang | BaseException | type[BaseException] | StepFunction"
)
StepFunction: TypeAlias = Callable[[list[Message], ModelOptions], "Step | Awaitable[Step]"]


def call(
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    raw: str | None = None,
    call_id: str | None = None,
) -> ScriptedCall:
    """A tool call: `arguments` as a dict, or `raw` argument text (e.g. malformed JSON)."""
    if arguments is not None and raw is not None:
        raise ValueError("give arguments or raw, not both")
    text = raw if raw is not None else json.dumps(arguments or {})
    return ScriptedCall(name=name, arguments_text=text, call_id=call_id)


def reply(
    text: str | None = None,
    tool_calls: Iterable[ScriptedCall | ToolCall] = (),
    finish: FinishReason | None = None,
    blocks: Iterable[ProviderBlock] = (),
    reasoning: str | None = None,
    usage: Usage | None = None,
) -> Reply:
    """A reply step. `finish` defaults to "tool_calls" when there are calls, else "stop";
    `usage` defaults to a count of the characters (≈4 a token)."""
    return Reply(text, tuple(tool_calls), finish, tuple(blocks), reasoning, usage)


def hang() -> Hang:
    """A step that waits until the request's signal aborts (AbortedError) or the task
    is cancelled: for testing aborts and timeouts without sleeping."""
    return Hang()


class _TestModel:
    """The request handling both test models share; subclasses pick each step."""

    def __init__(
        self,
        *,
        name: str,
        provider: str,
        capabilities: Capabilities | None,
        pricing: Pricing | None,
        usage: Usage | None,
    ) -> None:
        self.name = name
        self.provider = provider
        self.capabilities = capabilities or ALL_CAPABILITIES
        self.pricing = pricing
        self.usage = usage
        self.requests: list[tuple[list[Message], ModelOptions]] = []
        self._calls = 0
        self._responses = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, requests={len(self.requests)})"

    def _next_step(self, messages: list[Message], options: ModelOptions) -> Step:
        raise NotImplementedError

    async def complete(
        self,
        messages: Sequence[MessageLike],
        options: ModelOptions | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> ModelResponse:
        """The reply to this request, from the next step."""
        if signal is not None:
            signal.raise_if_aborted()  # an aborted request never reaches the "provider"
        history = as_messages(messages, "messages")  # dicts too, as the adapters take
        options = options or _NO_OPTIONS
        self.requests.append((history, options))
        step = self._next_step(history, options)
        return await abortable(self._resolve(step, history, options), signal)

    async def stream(
        self,
        messages: Sequence[MessageLike],
        options: ModelOptions | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> AsyncIterator[StreamChunk]:
        """The same reply as `complete()`, in chunks ending with `Done(response)`."""
        response = await self.complete(messages, options, signal=signal)
        for chunk in stream_chunks(response):
            if signal is not None:
                signal.raise_if_aborted()
            yield chunk

    async def _resolve(
        self, step: Step, messages: list[Message], options: ModelOptions
    ) -> ModelResponse:
        while True:
            if isinstance(step, str):
                return self._response(Reply(text=step), messages)
            if isinstance(step, Reply):
                return self._response(step, messages)
            if isinstance(step, ModelResponse):
                return step
            if isinstance(step, BaseException):
                raise step
            if isinstance(step, type):  # an exception class
                raise step(f"scripted {step.__name__}")
            if isinstance(step, Hang):
                await asyncio.get_running_loop().create_future()  # never set
                raise AssertionError("unreachable")
            if not callable(step):
                raise TypeError(f"{self!r}: not a step: {step!r}")
            produced = step(messages, options)
            step = await produced if inspect.isawaitable(produced) else produced

    def _response(self, step: Reply, messages: list[Message]) -> ModelResponse:
        content: list[ContentPart] = []
        if step.reasoning:
            data = {"type": "thinking", "thinking": step.reasoning}
            content.append(ProviderBlock(provider=self.provider, kind="thinking", data=data))
        content.extend(step.blocks)
        if step.text:
            content.append(TextPart(text=step.text))
        calls = [self._tool_call(c) for c in step.tool_calls]
        usage = step.usage or self.usage or self._count(step, calls, messages)
        if usage.cost is None:
            usage = price_usage(
                usage, provider=self.provider, model=self.name, declared=self.pricing
            )
        self._responses += 1
        return ModelResponse(
            content=content,
            tool_calls=calls,
            finish_reason=step.finish or ("tool_calls" if calls else "stop"),
            usage=usage,
            response_id=f"resp_{self._responses}",
            model=self.name,
            provider=self.provider,
        )

    def _tool_call(self, scripted: ScriptedCall | ToolCall) -> ToolCall:
        if isinstance(scripted, ToolCall):
            return scripted
        call_id = scripted.call_id
        if call_id is None:
            self._calls += 1
            call_id = f"call_{self._calls}"
        return ToolCall.parse(call_id, scripted.name, scripted.arguments_text)

    @staticmethod
    def _count(step: Reply, calls: list[ToolCall], messages: list[Message]) -> Usage:
        reasoning = _tokens(len(step.reasoning or ""))
        output = _tokens(len(step.text or "")) + reasoning
        output += _tokens(sum(len(c.name) + len(c.arguments_text) for c in calls))
        return Usage(
            requests=1,
            input_tokens=_tokens(sum(_chars(m) for m in messages)),
            output_tokens=output,
            reasoning_tokens=reasoning,
        )


def _tokens(chars: int) -> int:
    return -(-chars // _CHARS_PER_TOKEN)


def _chars(message: Message) -> int:
    chars = sum(len(p.text) for p in message.content if isinstance(p, TextPart))
    for tool_call in getattr(message, "tool_calls", ()):
        chars += len(tool_call.name) + len(tool_call.arguments_text)
    return chars


def stream_chunks(response: ModelResponse) -> Iterator[StreamChunk]:
    """A response as the chunks a provider would stream for it, ending with `Done`."""
    for block in response.blocks:
        thinking = block.data.get("thinking") if block.kind == "thinking" else None
        if isinstance(thinking, str):
            yield from (ReasoningDelta(piece) for piece in _pieces(thinking))
    yield from (TextDelta(piece) for piece in _pieces(response.text))
    for index, tool_call in enumerate(response.tool_calls):
        pieces = _pieces(tool_call.arguments_text) or [""]
        for piece in pieces:
            yield ToolCallDelta(index, tool_call.call_id, tool_call.name, piece)
    yield UsageChunk(response.usage)
    yield Done(response)


def _pieces(text: str) -> list[str]:
    size = max(1, -(-len(text) // _PIECES))
    return [text[i : i + size] for i in range(0, len(text), size)]


class ScriptedModel(_TestModel):
    """Answers each request with the next step of `replies`; one more request raises
    `ScriptExhausted`. `model.requests` records what each request sent."""

    def __init__(
        self,
        replies: Iterable[Step] | str,
        *,
        name: str = "scripted",
        provider: str = "test",
        capabilities: Capabilities | None = None,
        pricing: Pricing | None = None,
        usage: Usage | None = None,
    ) -> None:
        super().__init__(
            name=name, provider=provider, capabilities=capabilities, pricing=pricing, usage=usage
        )
        # A lone string is one text reply, not a script of single characters.
        self._script: deque[Step] = deque([replies] if isinstance(replies, str) else replies)
        self._length = len(self._script)

    @property
    def remaining(self) -> int:
        """Steps not played yet."""
        return len(self._script)

    def _next_step(self, messages: list[Message], options: ModelOptions) -> Step:
        if not self._script:
            raise ScriptExhausted(
                f"{self.name!r} got request {len(self.requests)} but its script has only "
                f"{self._length} step(s); last message: {_last_text(messages)!r}"
            )
        return self._script.popleft()


class FunctionModel(_TestModel):
    """Answers every request with the step `fn(messages, options)` returns (sync or
    async). `model.requests` records what each request sent."""

    def __init__(
        self,
        fn: StepFunction,
        *,
        name: str = "function",
        provider: str = "test",
        capabilities: Capabilities | None = None,
        pricing: Pricing | None = None,
    ) -> None:
        super().__init__(
            name=name, provider=provider, capabilities=capabilities, pricing=pricing, usage=None
        )
        self.fn = fn

    def _next_step(self, messages: list[Message], options: ModelOptions) -> Step:
        return self.fn


def _last_text(messages: list[Message]) -> str:
    text = messages[-1].text if messages else ""
    return text if len(text) <= 80 else text[:77] + "..."

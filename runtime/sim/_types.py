"""Wire-neutral values passed between request parsing, reply planning and rendering."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from typing_extensions import Required, TypedDict, Unpack

from ._script import Api

# The neutral finish reasons: the script's, plus "refusal" for a refused reply whose
# finish was not overridden (OpenAI says "stop", Anthropic "refusal").
Finish = Literal["stop", "length", "tool_calls", "content_filter", "pause_turn", "refusal"]


class WireError(Exception):
    """A request the provider would reject with 400 (``param`` names the bad field;
    ``status`` another 4xx where the provider sends one)."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int = 400,
    ):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.status = status


def typed_parts(value: object, kinds: Collection[str]) -> bool:
    """Whether `value` is a list of JSON objects, each of a `type` among `kinds`."""
    return isinstance(value, list) and all(
        isinstance(p, dict) and p.get("type") in kinds for p in value
    )


@dataclass(slots=True)
class ParsedRequest:
    """The facts about one chat request that rules, usage and replies depend on."""

    api: Api
    model: str
    stream: bool
    system_text: str
    last_user_text: str | None
    has_tools: bool
    after_tool_result: bool
    max_tokens: int | None
    include_usage: bool
    response_schema: dict[str, Any] | None
    json_mode: bool
    input_tokens: int
    prior_tool_calls: int
    # Prompt caching: prefixes that may be read from cache (hash, tokens), prefixes this
    # request writes, and the tokens up to its last cache breakpoint.
    cache_candidates: list[tuple[bytes, int]] = field(default_factory=list)
    cache_writes: list[bytes] = field(default_factory=list)
    cache_breakpoint_tokens: int = 0
    cache_ttl_1h: bool = False
    # Responses: reasoning items carry their encrypted content (``include``).
    encrypted_reasoning: bool = False
    # The service tier asked for, and the one the reply names (``_tiers``).
    service_tier: str | None = None
    served_tier: str | None = None
    # Anthropic server-side compaction this request triggered (``_compaction``).
    compacted: Compacted | None = None
    # Anthropic: the model the request's advisor tool names (``advisor_20260301``).
    advisor_model: str | None = None


@dataclass(slots=True)
class Compacted:
    """A server-side compaction made while answering: the block that goes first in the
    reply, the tokens of the context it closed, of the summary it wrote and of what the
    reply's turn reads after it, and whether the reply stops after it
    (``pause_after_compaction``)."""

    block: dict[str, Any]
    closed_tokens: int
    summary_tokens: int
    after_tokens: int
    pause: bool


@dataclass(slots=True)
class PlannedToolCall:
    id: str
    name: str
    arguments: str


@dataclass(slots=True)
class Plan:
    """A reply resolved against a request: what to send and the usage to report."""

    text: str | None
    refusal: str | None
    thinking: str | None
    thinking_signature: str | None
    redacted_thinking: str | None
    tool_calls: list[PlannedToolCall]
    finish: Finish
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    reasoning_tokens: int
    empty: bool = False
    # Anthropic's server tools: (use block, result block), and the text's citations.
    server_tools: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    citations: list[dict[str, Any]] = field(default_factory=list)
    # Chat Completions: content as a list of parts (Mistral), thinking included.
    list_content: bool = False
    # The provider's own finish reason, verbatim; a blocked prompt's reason (Gemini).
    finish_reason: str | None = None
    block_reason: str | None = None


@dataclass(slots=True)
class SSEStream:
    """Encoded SSE events, the output tokens each carries (for per-token latency), and
    the index of the first closing event (a truncated stream stops before it).
    `content_type`: what the stream is sent as (Bedrock's is a binary event stream)."""

    events: list[bytes]
    tokens: list[int]
    body_end: int
    content_type: str = "text/event-stream; charset=utf-8"


class ErrorWhere(TypedDict, total=False):
    """Where an error reply is from and what it names, for a wire's `error`: the
    request's id (every wire takes it), the provider's code and the parameter at fault
    (where the wire's errors carry them)."""

    request_id: Required[str]
    code: str | None
    param: str | None


class Wire(Protocol):
    """One provider's wire format: request parsing, bodies, SSE events, errors."""

    @property
    def api(self) -> Api: ...

    @property
    def tool_id_prefix(self) -> str: ...

    @property
    def request_id_header(self) -> str: ...

    @property
    def response_id_prefix(self) -> str: ...

    def parse(self, body: object) -> ParsedRequest: ...

    def api_key(self, headers: Mapping[str, str]) -> str | None: ...

    def error(
        self, status: int, message: str | None = None, **where: Unpack[ErrorWhere]
    ) -> bytes: ...

    def context_error(self, limit: int, tokens: int, *, request_id: str) -> bytes: ...

    def stream_error(self, data: bytes) -> bytes:
        """The SSE event that carries an error body inside a 200 stream."""
        ...

    def body(self, plan: Plan, req: ParsedRequest, response_id: str) -> bytes: ...

    def stream(self, plan: Plan, req: ParsedRequest, response_id: str) -> SSEStream: ...

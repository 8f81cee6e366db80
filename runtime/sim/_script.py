"""The script language of the simulator: rules, replies, faults and latency, as pydantic models."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Api = Literal["openai", "openai_responses", "anthropic", "bedrock", "gemini"]
FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "pause_turn"]
FaultKind = Literal[
    "status",
    "hang",
    "truncate",
    "malformed_tool_args",
    "not_json",
    "empty_choices",
    "context_exceeded",
    "refusal",
    "stream_error",
]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class Latency(_Model):
    """Simulated latency: time to first byte is ``fixed_ms`` plus a seeded jitter in
    ``[0, jitter_ms]``; each output token adds ``per_token_ms`` (spread over the chunks
    of a stream)."""

    fixed_ms: float = Field(default=0.0, ge=0)
    per_token_ms: float = Field(default=0.0, ge=0)
    jitter_ms: float = Field(default=0.0, ge=0)
    seed: int = 0


class Fault(_Model):
    """A failure to inject instead of (or into) a normal reply.

    ``status``: an error response with ``status`` and the provider's error body
    (``retry_after`` adds a ``Retry-After`` header). ``hang``: never answer (a stream
    first sends ``after_chunks`` SSE events). ``truncate``: cut the connection after
    ``after_chunks`` SSE events (non-stream: half the body). ``malformed_tool_args``:
    make each tool call's argument JSON invalid. ``not_json``: 200 with an HTML body.
    ``empty_choices``: OpenAI ``choices: []`` (Anthropic ``content: []``, Responses
    ``output: []``).
    ``context_exceeded``: the provider's 400 context-length error. ``refusal``: turn the
    reply into a refusal (``message`` is its text). ``stream_error``: a 200 stream that
    sends ``after_chunks`` events, then the provider's error event (a request that is
    not streamed gets it as a ``status`` error).

    ``body`` replaces the error body of ``status`` and ``stream_error`` (the event's
    data) and the HTML of ``not_json``, verbatim (a dict is sent as JSON); ``headers``
    are added to those responses. Together they script any error a provider or a
    gateway might send, such as one that echoes the request's key.
    """

    kind: FaultKind
    status: int = Field(default=500, ge=400, le=599)
    retry_after: float | None = Field(default=None, ge=0)
    after_chunks: int = Field(default=0, ge=0)
    message: str | None = None
    body: dict[str, Any] | str | None = None
    headers: dict[str, str] = Field(default_factory=dict)


class ToolCallReply(_Model):
    """A scripted tool call. A ``str`` ``arguments`` is sent verbatim (malformed JSON
    included); an absent ``id`` becomes ``call_<n>`` (OpenAI, both wires) or ``toolu_<n>``
    (Anthropic), ``n`` counting the tool calls of the conversation so far from 1; an
    empty ``id`` is sent as it is (Gemini: the call has no id)."""

    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    id: str | None = None

    def __init__(
        self,
        name: str | None = None,
        arguments: dict[str, Any] | str | None = None,
        id: str | None = None,
        **data: Any,
    ) -> None:
        if name is not None:
            data["name"] = name
        if arguments is not None:
            data["arguments"] = arguments
        if id is not None:
            data["id"] = id
        super().__init__(**data)


_SERVER_RESULTS = {
    # Anthropic's advisor tool: a second model's advice (see ServerToolReply).
    "advisor": "advisor_tool_result",
    "web_search": "web_search_tool_result",
    "web_fetch": "web_fetch_tool_result",
    "code_execution": "code_execution_tool_result",
    "bash_code_execution": "bash_code_execution_tool_result",
    "text_editor_code_execution": "text_editor_code_execution_tool_result",
    "tool_search_tool_regex": "tool_search_tool_result",
    "tool_search_tool_bm25": "tool_search_tool_result",
}


class ServerToolReply(_Model):
    """A tool the provider runs itself. Anthropic: a ``server_tool_use`` block
    (``mcp_tool_use`` when ``server_name`` names an MCP server) whose ``input`` streams
    as ``input_json_delta`` events (the first one empty, as Anthropic sends), then its
    result block. ``result`` is the result block's ``content`` verbatim; absent, a web
    search gets one result, an MCP tool a text, a code execution an empty run. An absent
    ``id`` becomes ``srvtoolu_<n>`` (``mcptoolu_`` for MCP), ``n`` counting the server
    tools of this reply from 1.

    ``advisor`` is Anthropic's advisor tool (``advisor_20260301``): its use has an empty
    input, its result an ``advisor_result`` (``result`` replaces it: an
    ``advisor_redacted_result``, an error), and the reply's ``usage.iterations`` gain an
    ``advisor_message`` entry: the model the request's advisor tool names (else the
    request's own), reading the request's input and writing the advice. Its tokens are
    not in the top-level usage, which stays the executor's. The OpenAI wires have no
    such tool: left out there.

    Responses: the matching built-in tool call item before the message, streamed with
    its own events: ``mcp_call`` (``server_label`` the server name, ``arguments`` the
    input as JSON, ``output`` the result's text), ``web_search_call`` (a ``search`` of
    ``input["query"]``; ``web_fetch`` an ``open_page`` of ``input["url"]``),
    ``code_interpreter_call`` (``input["code"]``, the result's stdout as logs),
    ``tool_search_call``; its id is ``ws_`` / ``mcp_`` / ``ci_`` / ``tsc_`` and the
    response's id and ``n``. Chat Completions has no such items: left out there."""

    name: str
    input: dict[str, Any] = Field(default_factory=dict)
    result: Any = None
    server_name: str | None = None
    id: str | None = None

    def __init__(
        self, name: str | None = None, input: dict[str, Any] | None = None, **data: Any
    ) -> None:
        if name is not None:
            data["name"] = name
        if input is not None:
            data["input"] = input
        super().__init__(**data)

    @model_validator(mode="after")
    def _known_result(self) -> ServerToolReply:
        if self.server_name is None and self.name not in _SERVER_RESULTS:
            raise ValueError(
                f"unknown server tool {self.name!r}: one of {sorted(_SERVER_RESULTS)},"
                " or give server_name for an MCP tool"
            )
        return self

    @property
    def result_type(self) -> str:
        return "mcp_tool_result" if self.server_name else _SERVER_RESULTS[self.name]


class UsageOverride(_Model):
    """Token numbers that replace the computed ones (``None`` keeps the computed value)."""

    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    cached_tokens: int | None = Field(default=None, ge=0)


class Reply(_Model):
    """What the simulated model answers. Parts are emitted in the order thinking,
    server tools, text (or ``json``), tool calls. On the Responses wire ``thinking`` is a
    reasoning item (its summary; its ``encrypted_content`` when the request includes
    it); Chat Completions sends it only with ``list_content``.

    ``server_tools``: see :class:`ServerToolReply`. ``citations`` are the text's:
    Anthropic's text block carries them verbatim (streamed as ``citations_delta``
    events before its text); the OpenAI wires send them as ``url_citation``
    annotations spanning the ``cited_text`` (the whole text when it is not found), with
    the citation's ``url`` and ``title``; a citation already of a Responses annotation
    kind (``url_citation``, ``file_citation``, ...) goes verbatim to the Responses wire.
    Responses streams them as ``response.output_text.annotation.added`` events after the
    text; Chat Completions puts them in ``message.annotations`` (streamed as a delta
    of its own after the text). ``list_content``
    makes Chat Completions send ``message.content`` (and each streamed
    ``delta.content``) as a list of parts, as Mistral does: a ``thinking`` part holding
    text parts, then a ``text`` part.

    ``finish_reason``: the finish reason as the provider names it, sent verbatim on the
    wires that have their own (Gemini: ``SAFETY``, ``RECITATION``, ``BLOCKLIST``,
    ``MALFORMED_FUNCTION_CALL``, ...); it overrides what ``finish`` maps to there.
    ``block_reason``: the prompt is blocked (Gemini's ``promptFeedback.blockReason``,
    e.g. ``SAFETY``): the reply has no candidate at all.
    """

    text: str | None = None
    tool_calls: list[ToolCallReply] = Field(default_factory=list)
    json_value: dict[str, Any] | Literal["schema"] | None = Field(default=None, alias="json")
    thinking: str | None = None
    redacted_thinking: str | None = None
    refusal: str | None = None
    finish: FinishReason | None = None
    fault: Fault | None = None
    latency_ms: float | None = Field(default=None, ge=0)
    usage: UsageOverride | None = None
    server_tools: list[ServerToolReply] = Field(default_factory=list)
    citations: list[dict[str, Any]] = Field(default_factory=list)
    list_content: bool = False
    finish_reason: str | None = None
    block_reason: str | None = None

    def __init__(
        self,
        *,
        text: str | None = None,
        tool_calls: Sequence[ToolCallReply] = (),
        json: dict[str, Any] | Literal["schema"] | None = None,
        thinking: str | None = None,
        redacted_thinking: str | None = None,
        refusal: str | None = None,
        finish: FinishReason | None = None,
        fault: Fault | None = None,
        latency_ms: float | None = None,
        usage: UsageOverride | None = None,
        server_tools: Sequence[ServerToolReply] = (),
        citations: Sequence[dict[str, Any]] = (),
        list_content: bool = False,
        finish_reason: str | None = None,
        block_reason: str | None = None,
    ) -> None:
        # Spelled out so that ``Reply(json=...)`` type-checks: the field is ``json_value``
        # because ``json`` would shadow a BaseModel method.
        data: dict[str, Any] = {
            "text": text,
            "tool_calls": list(tool_calls),
            "json_value": json,
            "thinking": thinking,
            "redacted_thinking": redacted_thinking,
            "refusal": refusal,
            "finish": finish,
            "fault": fault,
            "latency_ms": latency_ms,
            "usage": usage,
            "server_tools": list(server_tools),
            "citations": list(citations),
            "list_content": list_content,
            "finish_reason": finish_reason,
            "block_reason": block_reason,
        }
        super().__init__(**data)


class Match(_Model):
    """Conditions on a request; all given ones must hold. Regexes use ``re.search``."""

    last_user: str | None = None
    api: Api | None = None
    model: str | None = None
    has_tools: bool | None = None
    after_tool_result: bool | None = None
    stream: bool | None = None
    system: str | None = None

    @field_validator("last_user", "model", "system")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"invalid regex {value!r}: {exc}") from None
        return value


class Rule(_Model):
    """First matching rule wins. A list of replies is used in order, one per firing,
    cycling; ``times=N`` retires the rule after N firings."""

    match: Match = Field(default_factory=Match)
    reply: Reply | list[Reply]
    times: int | None = Field(default=None, ge=0)

    @field_validator("match", mode="before")
    @classmethod
    def _match_none(cls, value: object) -> object:
        return {} if value is None else value

    @field_validator("reply", mode="before")
    @classmethod
    def _reply_shorthand(cls, value: object) -> object:
        # A bare string is a text reply: keeps YAML scripts short.
        if isinstance(value, str):
            return {"text": value}
        if isinstance(value, list):
            return [{"text": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("reply")
    @classmethod
    def _non_empty(cls, value: Reply | list[Reply]) -> Reply | list[Reply]:
        if isinstance(value, list) and not value:
            raise ValueError("reply list must not be empty")
        return value


class Script(_Model):
    """An ordered list of rules plus the reply used when none matches (``None``: the
    simulator's deterministic default reply)."""

    rules: list[Rule] = Field(default_factory=list)
    default: Reply | None = None

    @model_validator(mode="before")
    @classmethod
    def _list_is_rules(cls, value: object) -> object:
        return {"rules": value} if isinstance(value, list) else value

    @field_validator("default", mode="before")
    @classmethod
    def _default_shorthand(cls, value: object) -> object:
        return {"text": value} if isinstance(value, str) else value

    @classmethod
    def from_file(cls, path: str | Path) -> Script:
        """Load a script from a ``.json`` file, or YAML for any other suffix."""
        p = Path(path)
        text = p.read_text(encoding="utf-8")
        if p.suffix.lower() == ".json":
            return cls.model_validate_json(text)
        return cls.model_validate(yaml.safe_load(text) or {})


ScriptLike = Script | dict[str, Any] | list[Any] | str | Path | None


def load_script(script: ScriptLike) -> Script:
    """Turn whatever ``serve(script=...)`` accepts into a :class:`Script`."""
    if script is None:
        return Script()
    if isinstance(script, Script):
        return script
    if isinstance(script, (str, Path)):
        return Script.from_file(script)
    return Script.model_validate(script)

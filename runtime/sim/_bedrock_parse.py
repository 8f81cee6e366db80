"""Reading a Converse request body as Bedrock validates it: the facts rules and usage
depend on (:class:`BedrockRequest`), or the ``ValidationException`` Bedrock answers.

The model comes from the URL (``/model/{modelId}/converse``), not the body. Checks made
as Bedrock makes them: a conversation starts with a user turn and alternates; no content
is empty and no text blank; each block is one member of the content union; every
``toolUse`` is answered by a ``toolResult`` with its id in the next user turn; tool
blocks need a ``toolConfig``; images and documents name a known format and one source
(base64 bytes that decode, or an S3 location); ``cachePoint`` blocks are of type
``default``; a Claude model's reasoning block goes back with the signature it came with
(checked as Anthropic checks it); a thinking budget is at least 1,024 and below
``maxTokens``.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import from_json, to_json

from ._plan import thinking_signature
from ._tokens import MEDIA_TOKENS, MESSAGE_OVERHEAD, PrefixHasher, count_tokens
from ._types import ParsedRequest, WireError

_TOP_LEVEL = frozenset(
    {
        "messages",
        "system",
        "inferenceConfig",
        "toolConfig",
        "guardrailConfig",
        "additionalModelRequestFields",
        "promptVariables",
        "additionalModelResponseFieldPaths",
        "requestMetadata",
        "performanceConfig",
        "serviceTier",
        "outputConfig",
    }
)
_CONTENT = frozenset(
    {
        "text",
        "image",
        "document",
        "video",
        "audio",
        "toolUse",
        "toolResult",
        "guardContent",
        "cachePoint",
        "reasoningContent",
        "citationsContent",
        "searchResult",
    }
)
_SYSTEM = frozenset({"text", "guardContent", "cachePoint"})
_RESULT = frozenset({"json", "text", "image", "document", "video", "searchResult"})
IMAGE_FORMATS = ("png", "jpeg", "gif", "webp")
DOCUMENT_FORMATS = ("pdf", "csv", "doc", "docx", "xls", "xlsx", "html", "txt", "md")
SERVICE_TIERS = ("priority", "default", "flex", "reserved")
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
# Bedrock's rule for a document's name: letters, digits, single spaces, hyphens,
# parentheses and square brackets.
_DOCUMENT_NAME = re.compile(r"^(?!.*\s\s)[a-zA-Z0-9\s\-\(\)\[\]]{1,200}$")
_MIN_THINKING = 1024


@dataclass(slots=True)
class BedrockRequest(ParsedRequest):
    """A Converse request's facts, with what only Bedrock's replies depend on."""

    stop_sequences: list[str] = field(default_factory=list)
    guardrail: str | None = None  # the guardrail's identifier
    guardrail_trace: bool = False
    cache_points: bool = False  # the request marked a cache point: usage names cache tokens


def parse_converse(body: object, *, model: str, stream: bool) -> BedrockRequest:
    """The facts of a Converse body for `model` (WireError: Bedrock's 400)."""
    if not isinstance(body, dict):
        raise WireError("The request body must be a JSON object.")
    unknown = sorted(set(body) - _TOP_LEVEL)
    if unknown:
        raise WireError(f"Unexpected field(s) in the request: {', '.join(unknown)}.")
    inference = _object(body, "inferenceConfig")
    max_tokens = _max_tokens(inference)
    _unit_range(inference, "temperature")
    _unit_range(inference, "topP")
    walk = _Walk(claude="anthropic.claude" in model)
    tool_config = _object(body, "toolConfig")
    walk.tools(tool_config)
    walk.system(body.get("system"))
    walk.messages(body.get("messages"), has_tool_config=bool(tool_config.get("tools")))
    guardrail = _object(body, "guardrailConfig")
    _thinking_budget(_object(body, "additionalModelRequestFields"), max_tokens)
    req = BedrockRequest(
        api="bedrock",
        model=model,
        stream=stream,
        system_text=walk.system_text,
        last_user_text=walk.last_user,
        has_tools=bool(tool_config.get("tools")),
        after_tool_result=walk.after_tool_result,
        max_tokens=max_tokens,
        include_usage=True,
        response_schema=_output_schema(_object(body, "outputConfig")),
        json_mode=False,
        input_tokens=walk.total,
        prior_tool_calls=walk.tool_uses,
        service_tier=_service_tier(_object(body, "serviceTier")),
        stop_sequences=_stop_sequences(inference),
        guardrail=_guardrail(guardrail),
        guardrail_trace=guardrail.get("trace") in ("enabled", "enabled_full"),
        cache_points=bool(walk.breakpoints),
    )
    if walk.breakpoints:
        walk.cache_prefixes(req)
    return req


def _object(body: dict[str, Any], key: str) -> dict[str, Any]:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WireError(f"{key} must be an object.", param=key)
    return value


def _max_tokens(inference: dict[str, Any]) -> int | None:
    value = inference.get("maxTokens")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise WireError(
            f"1 validation error detected: Value '{value}' at 'inferenceConfig.maxTokens' "
            "failed to satisfy constraint: Member must have value greater than or equal to 1",
            param="inferenceConfig.maxTokens",
        )
    return value


def _unit_range(inference: dict[str, Any], key: str) -> None:
    value = inference.get(key)
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1
    ):
        raise WireError(
            f"1 validation error detected: Value '{value}' at 'inferenceConfig.{key}' failed "
            "to satisfy constraint: Member must have value between 0 and 1",
            param=f"inferenceConfig.{key}",
        )


def _stop_sequences(inference: dict[str, Any]) -> list[str]:
    value = inference.get("stopSequences") or []
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise WireError("inferenceConfig.stopSequences must be a list of non-empty strings.")
    return list(value)


def _service_tier(tier: dict[str, Any]) -> str | None:
    if not tier:
        return None
    kind = tier.get("type")
    if kind not in SERVICE_TIERS:
        raise WireError(
            f"1 validation error detected: Value '{kind}' at 'serviceTier.type' failed to "
            f"satisfy constraint: Member must satisfy enum value set: [{', '.join(SERVICE_TIERS)}]",
            param="serviceTier.type",
        )
    return str(kind)


def _guardrail(config: dict[str, Any]) -> str | None:
    if not config:
        return None
    ident, version = config.get("guardrailIdentifier"), config.get("guardrailVersion")
    if not isinstance(ident, str) or not ident or not isinstance(version, str) or not version:
        raise WireError(
            "guardrailConfig needs a guardrailIdentifier and a guardrailVersion.",
            param="guardrailConfig",
        )
    return ident


def _output_schema(output: dict[str, Any]) -> dict[str, Any] | None:
    text_format = output.get("textFormat")
    if text_format is None:
        return None
    if not isinstance(text_format, dict) or text_format.get("type") != "json_schema":
        raise WireError("outputConfig.textFormat.type must be json_schema.", param="outputConfig")
    structure = text_format.get("structure")
    schema_def = structure.get("jsonSchema") if isinstance(structure, dict) else None
    raw = schema_def.get("schema") if isinstance(schema_def, dict) else None
    if not isinstance(raw, str):
        raise WireError(
            "outputConfig.textFormat.structure.jsonSchema.schema must be a JSON schema "
            "serialised as a string.",
            param="outputConfig",
        )
    try:
        schema = from_json(raw)
    except ValueError:
        schema = None
    if not isinstance(schema, dict):
        raise WireError("The JSON schema in outputConfig is not valid JSON.", param="outputConfig")
    return schema


def _thinking_budget(fields: dict[str, Any], max_tokens: int | None) -> None:
    """Anthropic's rule for Claude's extended thinking, passed through Bedrock."""
    thinking = fields.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or budget < _MIN_THINKING:
        raise WireError(
            f"thinking.budget_tokens: Input should be greater than or equal to {_MIN_THINKING}"
        )
    if max_tokens is not None and budget >= max_tokens:
        raise WireError("`max_tokens` must be greater than `thinking.budget_tokens`.")


def _blank(where: str) -> WireError:
    return WireError(
        f"The text field in the ContentBlock object at {where} is blank. Add text to the "
        "text field, and try again."
    )


class _Walk:
    """One pass over tools, system and messages in prompt order: token counts per unit
    and the cache points, as the Anthropic wire's walk."""

    def __init__(self, *, claude: bool) -> None:
        self.claude = claude
        self.units: list[tuple[Any, int]] = []
        self.breakpoints: list[tuple[int, bool]] = []  # (last unit before it, 1h ttl)
        self.total = 0
        self.system_text = ""
        self.last_user: str | None = None
        self.after_tool_result = False
        self.tool_uses = 0

    def unit(self, payload: Any, tokens: int) -> None:
        self.units.append((payload, tokens))
        self.total += tokens

    def cache_point(self, block: dict[str, Any], where: str) -> None:
        point = block.get("cachePoint")
        if not isinstance(point, dict) or point.get("type") != "default":
            raise WireError(f"{where}.cachePoint.type must be default.", param=where)
        ttl = point.get("ttl")
        if ttl not in (None, "5m", "1h"):
            raise WireError(f"{where}.cachePoint.ttl must be 5m or 1h.", param=where)
        if self.units:
            self.breakpoints.append((len(self.units) - 1, ttl == "1h"))

    def tools(self, config: dict[str, Any]) -> None:
        if not config:
            return
        tools = config.get("tools")
        if not isinstance(tools, list) or not tools:
            raise WireError("toolConfig.tools must be a non-empty list.", param="toolConfig")
        for i, tool in enumerate(tools):
            where = f"toolConfig.tools.{i}"
            if isinstance(tool, dict) and set(tool) == {"cachePoint"}:
                self.cache_point(tool, where)
                continue
            spec = tool.get("toolSpec") if isinstance(tool, dict) else None
            if not isinstance(spec, dict):
                raise WireError(f"{where} must hold a toolSpec or a cachePoint.", param=where)
            name = spec.get("name")
            if not isinstance(name, str) or not _TOOL_NAME.match(name):
                raise WireError(
                    f"{where}.toolSpec.name must match [a-zA-Z0-9_-]{{1,64}}.", param=where
                )
            schema = spec.get("inputSchema")
            if not isinstance(schema, dict) or not isinstance(schema.get("json"), dict):
                raise WireError(f"{where}.toolSpec.inputSchema.json is required.", param=where)
            self.unit(tool, count_tokens(to_json(spec).decode()))
        self._tool_choice(config.get("toolChoice"), tools)

    def _tool_choice(self, choice: object, tools: list[Any]) -> None:
        if choice is None:
            return
        if (
            not isinstance(choice, dict)
            or len(choice) != 1
            or next(iter(choice))
            not in (
                "auto",
                "any",
                "tool",
            )
        ):
            raise WireError("toolConfig.toolChoice must be one of auto, any or tool.")
        named = choice.get("tool")
        if named is not None:
            names = {t["toolSpec"]["name"] for t in tools if "toolSpec" in t}
            if not isinstance(named, dict) or named.get("name") not in names:
                raise WireError("toolConfig.toolChoice.tool names a tool that is not defined.")

    def system(self, system: object) -> None:
        if system is None:
            return
        if not isinstance(system, list):
            raise WireError("system must be a list of SystemContentBlock.", param="system")
        texts = []
        first = True
        for i, block in enumerate(system):
            where = f"system.{i}"
            kind = _member(block, _SYSTEM, where)
            if kind == "cachePoint":
                self.cache_point(block, where)
                continue
            text = block.get("text")
            if kind == "text":
                if not isinstance(text, str) or not text.strip():
                    raise _blank(where)
                texts.append(text)
            self.unit(block, count_tokens(str(text or "")) + (MESSAGE_OVERHEAD if first else 0))
            first = False
        self.system_text = "\n".join(texts)

    def messages(self, messages: object, *, has_tool_config: bool) -> None:
        if not isinstance(messages, list) or not messages:
            raise WireError(
                "A conversation must start with a user message. Try again with a "
                "conversation that starts with a user message.",
                param="messages",
            )
        pending: list[str] = []  # the toolUse ids of the last assistant turn
        previous = None
        for index, msg in enumerate(messages):
            where = f"messages.{index}"
            role = msg.get("role") if isinstance(msg, dict) else None
            if role not in ("user", "assistant"):
                raise WireError(f"{where}.role must be user or assistant.", param=where)
            if previous is None and role != "user":
                raise WireError(
                    "A conversation must start with a user message. Try again with a "
                    "conversation that starts with a user message.",
                    param="messages",
                )
            if role == previous:
                raise WireError(
                    "A conversation must alternate between user and assistant roles. Make "
                    "sure the conversation alternates between user and assistant roles and "
                    "try again.",
                    param="messages",
                )
            previous = role
            content = msg.get("content")
            if not isinstance(content, list) or not content:
                raise WireError(
                    f"The content field in the Message object at {where} is empty. Add a "
                    "ContentBlock object to the content field and try again.",
                    param=where,
                )
            self.unit(role, MESSAGE_OVERHEAD)
            pending = self._turn(role, content, where, pending, has_tool_config)
        if pending:
            raise WireError(
                f"Expected toolResult blocks at messages.{len(messages)}.content for the "
                f"following Ids: {', '.join(pending)}",
                param="messages",
            )

    def _turn(
        self,
        role: str,
        content: list[Any],
        where: str,
        pending: list[str],
        has_tool_config: bool,
    ) -> list[str]:
        """One message's blocks; the toolUse ids it leaves to be answered."""
        texts: list[str] = []
        answered: list[str] = []
        uses: list[str] = []
        for i, block in enumerate(content):
            at = f"{where}.content.{i}"
            kind = _member(block, _CONTENT, at)
            if kind == "cachePoint":
                self.cache_point(block, at)
                continue
            if kind in ("toolUse", "toolResult") and not has_tool_config:
                raise WireError(
                    "The toolConfig field must be defined when using toolUse and toolResult "
                    "content blocks.",
                    param="toolConfig",
                )
            tokens = self._block(kind, block[kind], role, at)
            self.unit(block, tokens)
            if kind == "text":
                texts.append(block["text"])
            elif kind == "toolUse":
                self.tool_uses += 1
                uses.append(block["toolUse"]["toolUseId"])
            elif kind == "toolResult":
                answered.append(block["toolResult"]["toolUseId"])
        if role == "user":
            extra = [a for a in answered if a not in pending]
            missing = [p for p in pending if p not in answered]
            if missing or extra:
                raise WireError(
                    f"Expected toolResult blocks at {where}.content for the following Ids: "
                    f"{', '.join(missing or pending)}"
                    + (f"; found unexpected Ids: {', '.join(extra)}" if extra else ""),
                    param="messages",
                )
            if texts:
                self.last_user = "\n".join(texts)
            self.after_tool_result = bool(answered)
        elif pending:
            raise WireError(
                f"Expected toolResult blocks at {where}.content for the following Ids: "
                f"{', '.join(pending)}",
                param="messages",
            )
        return uses if role == "assistant" else []

    def _block(self, kind: str, value: Any, role: str, at: str) -> int:
        """A block's tokens, after Bedrock's checks of it."""
        if kind == "text":
            if not isinstance(value, str) or not value.strip():
                raise _blank(at)
            return count_tokens(value)
        if kind == "image":
            _media(value, IMAGE_FORMATS, f"{at}.image")
            return MEDIA_TOKENS
        if kind == "document":
            _media(value, DOCUMENT_FORMATS, f"{at}.document")
            name = value.get("name")
            if not isinstance(name, str) or not _DOCUMENT_NAME.match(name):
                raise WireError(
                    f"{at}.document.name: the name can only contain alphanumeric characters, "
                    "whitespace characters, hyphens, parentheses, and square brackets, with "
                    "no more than one whitespace character in a row.",
                    param=at,
                )
            return MEDIA_TOKENS
        if kind == "toolUse":
            return self._tool_use(value, role, at)
        if kind == "toolResult":
            return _tool_result(value, role, at)
        if kind == "reasoningContent":
            return self._reasoning(value, role, at)
        return count_tokens(to_json(value).decode())

    def _tool_use(self, value: Any, role: str, at: str) -> int:
        if role != "assistant":
            raise WireError(f"{at}: toolUse blocks belong to assistant messages.", param=at)
        if not isinstance(value, dict) or not all(
            isinstance(value.get(k), str) and value.get(k) for k in ("toolUseId", "name")
        ):
            raise WireError(f"{at}.toolUse needs a toolUseId and a name.", param=at)
        if "input" not in value:
            raise WireError(f"{at}.toolUse.input is required.", param=at)
        return count_tokens(value["name"]) + count_tokens(to_json(value["input"]).decode())

    def _reasoning(self, value: Any, role: str, at: str) -> int:
        if role != "assistant":
            raise WireError(f"{at}: reasoningContent belongs to assistant messages.", param=at)
        if not isinstance(value, dict) or len(value) != 1:
            raise WireError(
                f"{at}.reasoningContent must hold reasoningText or redactedContent.", param=at
            )
        if "redactedContent" in value:
            _base64(value["redactedContent"], f"{at}.reasoningContent.redactedContent")
            return count_tokens(str(value["redactedContent"]))
        reasoning = value.get("reasoningText")
        text = reasoning.get("text") if isinstance(reasoning, dict) else None
        if not isinstance(text, str):
            raise WireError(f"{at}.reasoningContent.reasoningText.text is required.", param=at)
        if self.claude:
            signature = reasoning.get("signature") if isinstance(reasoning, dict) else None
            if signature is None:
                raise WireError(f"{at}.reasoningContent.reasoningText.signature: Field required")
            if signature != thinking_signature(text):
                raise WireError(f"{at}: Invalid `signature` in `thinking` block")
        return count_tokens(text)

    def cache_prefixes(self, req: BedrockRequest) -> None:
        """Prefixes end at unit boundaries; each up to the last cache point may be read
        from cache, and each cache point's prefix is written."""
        points = {at for at, _ in self.breakpoints}
        last = max(points)
        hasher = PrefixHasher(req.model)
        total = 0
        for i, (payload, tokens) in enumerate(self.units[: last + 1]):
            hasher.update(to_json(payload))
            total += tokens
            digest = hasher.checkpoint()
            req.cache_candidates.append((digest, total))
            if i in points:
                req.cache_writes.append(digest)
        req.cache_breakpoint_tokens = total
        req.cache_ttl_1h = max(self.breakpoints)[1]


def _member(block: object, kinds: frozenset[str], where: str) -> str:
    """The union member a block sets (exactly one, and known)."""
    if not isinstance(block, dict) or len(block) != 1 or next(iter(block)) not in kinds:
        raise WireError(f"{where} must set exactly one of {', '.join(sorted(kinds))}.", param=where)
    return str(next(iter(block)))


def _media(value: Any, formats: tuple[str, ...], where: str) -> None:
    if not isinstance(value, dict) or value.get("format") not in formats:
        raise WireError(f"{where}.format must be one of {', '.join(formats)}.", param=where)
    source = value.get("source")
    if not isinstance(source, dict) or len(source) != 1:
        raise WireError(f"{where}.source must set exactly one source.", param=where)
    if "bytes" in source:
        _base64(source["bytes"], f"{where}.source.bytes")
    elif "s3Location" in source:
        location = source["s3Location"]
        uri = location.get("uri") if isinstance(location, dict) else None
        if not isinstance(uri, str) or not uri.startswith("s3://"):
            raise WireError(f"{where}.source.s3Location.uri must be an s3:// URI.", param=where)
    elif "text" not in source and "content" not in source:
        raise WireError(f"{where}.source must be bytes or s3Location.", param=where)


def _base64(value: Any, where: str) -> None:
    try:
        if not isinstance(value, str) or not value:
            raise ValueError
        base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error):
        raise WireError(f"{where} is not valid base64.", param=where) from None


def _tool_result(value: Any, role: str, at: str) -> int:
    if role != "user":
        raise WireError(f"{at}: toolResult blocks belong to user messages.", param=at)
    if not isinstance(value, dict) or not isinstance(value.get("toolUseId"), str):
        raise WireError(f"{at}.toolResult.toolUseId is required.", param=at)
    content = value.get("content")
    if not isinstance(content, list):
        raise WireError(f"{at}.toolResult.content is required.", param=at)
    status = value.get("status")
    if status not in (None, "success", "error"):
        raise WireError(f"{at}.toolResult.status must be success or error.", param=at)
    tokens = 0
    for j, part in enumerate(content):
        where = f"{at}.toolResult.content.{j}"
        kind = _member(part, _RESULT, where)
        inner = part[kind]
        if kind == "text":
            tokens += count_tokens(str(inner))
        elif kind == "json":
            tokens += count_tokens(to_json(inner).decode())
        elif kind == "image":
            _media(inner, IMAGE_FORMATS, f"{where}.image")
            tokens += MEDIA_TOKENS
        elif kind == "document":
            _media(inner, DOCUMENT_FORMATS, f"{where}.document")
            tokens += MEDIA_TOKENS
        else:
            tokens += MEDIA_TOKENS
    return tokens

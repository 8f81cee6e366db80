"""The facts of a Gemini ``generateContent`` request (Gemini API and Vertex AI alike):
contents and roles, the system instruction, tools, ``generationConfig`` (structured
output, ``thinkingConfig``), the service tier, a ``cachedContent`` it reads, its tokens
by modality, its implicit-cache prefixes, and the thought signatures it sends back."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import to_json

from . import _gemini_signatures as signatures
from ._tokens import MEDIA_TOKENS, MESSAGE_OVERHEAD, PrefixHasher, count_tokens
from ._types import ParsedRequest, WireError

# Implicit caching: Gemini 2.5 and later cache a repeated prefix of at least this many.
CACHE_MIN_TOKENS = 1024
_GEMINI_3 = re.compile(r"(^|/)gemini-3")
_ROLES = ("user", "model")
_TIERS = {"flex": "flex", "standard": "standard", "priority": "priority"}
_OPENAPI_TYPES = ("STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL")


@dataclass(frozen=True, slots=True)
class CachedPrompt:
    """What a request reads from an explicit ``cachedContent``: its model, its tokens
    (by modality), and the system text and last user text it holds."""

    name: str
    model: str
    tokens: int
    modalities: dict[str, int]
    system_text: str
    last_user: str | None
    has_tools: bool


CacheLookup = Callable[[str], "CachedPrompt | None"]


@dataclass(slots=True)
class GeminiRequest(ParsedRequest):
    """A parsed request, and what only Gemini's replies depend on."""

    vertex: bool = False
    include_thoughts: bool = False
    signs: bool = False  # the reply's parts carry thought signatures
    explicit_cached: int = 0  # tokens read from the request's cachedContent
    modalities: dict[str, int] = field(default_factory=dict)
    builtin_tools: tuple[str, ...] = ()


def model_id(model: str) -> str:
    """A model's id without its resource prefix (``models/``, ``publishers/google/models/``)."""
    return model.rsplit("/", 1)[-1]


def get(body: dict[str, Any], camel: str) -> Any:
    """A field by its JSON name, or by its proto name (the API accepts both)."""
    if camel in body:
        return body[camel]
    return body.get(re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel))


def parse(
    body: object,
    *,
    model: str,
    stream: bool,
    vertex: bool,
    caches: CacheLookup,
    header_tier: str | None = None,
) -> GeminiRequest:
    """The request's facts; WireError for what Gemini refuses with 400."""
    if not isinstance(body, dict):
        raise WireError("Invalid JSON payload received. Expected an object.")
    contents = get(body, "contents")
    if not isinstance(contents, list) or not contents:
        raise WireError("* GenerateContentRequest.contents: contents is not specified\n")
    cached = _cached(body, model, caches)
    walk = _Walk(model)
    if cached is not None:
        walk.total, walk.modalities = cached.tokens, dict(cached.modalities)
        walk.system_text, walk.last_user = cached.system_text, cached.last_user
    walk.tools(get(body, "tools"))
    walk.system(get(body, "systemInstruction"))
    fixed = walk.total
    walk.contents(contents)
    config = get(body, "generationConfig") or {}
    if not isinstance(config, dict):
        raise WireError("Invalid value at 'generation_config'.", param="generation_config")
    thinking = _thinking(get(config, "thinkingConfig"), model)
    schema, json_mode = _response_format(config)
    req = GeminiRequest(
        api="gemini",
        model=model,
        stream=stream,
        system_text=walk.system_text,
        last_user_text=walk.last_user,
        has_tools=walk.functions > 0 or (cached is not None and cached.has_tools),
        after_tool_result=walk.after_tool_result,
        max_tokens=_max_tokens(config),
        include_usage=True,
        response_schema=schema,
        json_mode=json_mode,
        input_tokens=walk.total,
        prior_tool_calls=walk.calls,
        service_tier=_tier(get(body, "serviceTier"), header_tier),
        vertex=vertex,
        include_thoughts=thinking[0],
        signs=bool(_GEMINI_3.search(model)) or thinking[1],
        explicit_cached=cached.tokens if cached is not None else 0,
        modalities=walk.modalities,
        builtin_tools=tuple(walk.builtin),
    )
    signatures.check(contents, enforce=bool(_GEMINI_3.search(model)), vertex=vertex)
    if cached is None and walk.total >= CACHE_MIN_TOKENS:
        walk.cache_prefixes(req, fixed)
    return req


def cached_prompt(name: str, model: str, body: dict[str, Any]) -> CachedPrompt:
    """What a ``cachedContents`` create body holds, as later requests read it."""
    walk = _Walk(model)
    walk.tools(get(body, "tools"))
    walk.system(get(body, "systemInstruction"))
    contents = get(body, "contents") or []
    if not isinstance(contents, list):
        raise WireError("Invalid value at 'cached_content.contents'.", param="contents")
    walk.contents(contents)
    return CachedPrompt(
        name=name,
        model=model,
        tokens=walk.total,
        modalities=walk.modalities,
        system_text=walk.system_text,
        last_user=walk.last_user,
        has_tools=walk.functions > 0,
    )


def _cached(body: dict[str, Any], model: str, caches: CacheLookup) -> CachedPrompt | None:
    name = get(body, "cachedContent")
    if name is None:
        return None
    if not isinstance(name, str):
        raise WireError("Invalid value at 'cached_content'.", param="cached_content")
    found = caches(name)
    if found is None:
        raise WireError(f"CachedContent not found (or permission denied) for {name}.", status=403)
    if any(get(body, key) for key in ("systemInstruction", "tools", "toolConfig")):
        raise WireError(
            "CachedContent can not be used with GenerateContent request setting "
            "system_instruction, tools or tool_config.\n\nProposed fix: move those values to "
            "CachedContent from GenerateContent request."
        )
    if model_id(found.model) != model_id(model):
        raise WireError(
            f"Model used by GenerateContent request (models/{model_id(model)}) and "
            f"CachedContent (models/{model_id(found.model)}) has to be the same."
        )
    return found


def _max_tokens(config: dict[str, Any]) -> int | None:
    value = get(config, "maxOutputTokens")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise WireError(
            "* GenerateContentRequest.generation_config.max_output_tokens: must be positive",
            param="generation_config.max_output_tokens",
        )
    return value


def _thinking(config: object, model: str) -> tuple[bool, bool]:
    """(include thought summaries, thinking on) from a ``thinkingConfig``."""
    if config is None:
        return False, False
    if not isinstance(config, dict):
        raise WireError("Invalid value at 'generation_config.thinking_config'.")
    budget, level = get(config, "thinkingBudget"), get(config, "thinkingLevel")
    if budget is not None and level is not None:
        raise WireError(
            "You can only set only one of thinking budget and thinking level.",
            param="generation_config.thinking_config",
        )
    if level is not None and not _GEMINI_3.search(model):
        raise WireError("Thinking level is not supported for this model.")
    include = bool(get(config, "includeThoughts"))
    return include, budget != 0


def _response_format(config: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    mime = get(config, "responseMimeType")
    json_schema, openapi = get(config, "responseJsonSchema"), get(config, "responseSchema")
    if json_schema is not None and openapi is not None:
        raise WireError(
            "response_schema and response_json_schema cannot both be set.",
            param="generation_config",
        )
    schema = json_schema if json_schema is not None else openapi
    if schema is not None and mime not in ("application/json", "text/x.enum"):
        raise WireError(
            "* GenerateContentRequest.generation_config.response_mime_type: response_schema "
            "is only supported for response_mime_type application/json or text/x.enum\n",
            param="generation_config.response_mime_type",
        )
    if schema is not None and not isinstance(schema, dict):
        raise WireError("Invalid value at 'generation_config.response_schema'.")
    if openapi is not None:
        schema = _from_openapi(openapi)
    return schema, mime == "application/json"


def _from_openapi(schema: Any) -> Any:
    """Gemini's OpenAPI subset (``type: "OBJECT"``, ``nullable``) as a JSON schema."""
    if isinstance(schema, list):
        return [_from_openapi(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _from_openapi(v) for k, v in schema.items() if k not in ("nullable", "type")}
    kind = schema.get("type")
    if isinstance(kind, str):
        if kind.upper() not in _OPENAPI_TYPES:
            raise WireError(f"Invalid value at 'generation_config.response_schema.type', {kind}")
        out["type"] = kind.lower()
    if "properties" in schema and isinstance(schema["properties"], dict):
        out["properties"] = {k: _from_openapi(v) for k, v in schema["properties"].items()}
    return out


def _tier(value: object, header: str | None) -> str | None:
    """``flex``, ``standard`` or ``priority`` (any case, ``SERVICE_TIER_`` prefixed or
    not), from the body or Vertex's shared-request-type header."""
    raw = value if value is not None else header
    if raw is None:
        return None
    name = str(raw).lower().removeprefix("service_tier_")
    if name in ("unspecified", ""):
        return None
    tier = _TIERS.get(name)
    if tier is None:
        raise WireError(
            "Invalid value at 'service_tier' (type.googleapis.com/google.ai."
            f'generativelanguage.v1beta.ServiceTier), "{raw}"',
            param="service_tier",
        )
    return tier


def modality(mime: object) -> str:
    kind = str(mime or "").split("/", 1)[0]
    return {"image": "IMAGE", "audio": "AUDIO", "video": "VIDEO", "text": "TEXT"}.get(
        kind, "DOCUMENT"
    )


class _Walk:
    """One pass over tools, system instruction and contents in prompt order."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.total = 0
        self.modalities: dict[str, int] = {}
        self.system_text = ""
        self.last_user: str | None = None
        self.after_tool_result = False
        self.calls = 0
        self.functions = 0
        self.builtin: list[str] = []
        self.units: list[tuple[bytes, int]] = []

    def add(self, tokens: int, kind: str = "TEXT") -> None:
        self.total += tokens
        if tokens:
            self.modalities[kind] = self.modalities.get(kind, 0) + tokens

    def tools(self, tools: object) -> None:
        if tools is None:
            return
        if not isinstance(tools, list):
            raise WireError("Invalid value at 'tools'.", param="tools")
        for tool in tools:
            if not isinstance(tool, dict):
                raise WireError("Invalid value at 'tools'.", param="tools")
            declarations = get(tool, "functionDeclarations") or []
            for declaration in declarations:
                if not isinstance(declaration, dict) or not declaration.get("name"):
                    raise WireError(
                        "* GenerateContentRequest.tools[0].function_declarations[0].name: "
                        "Invalid function name.",
                        param="tools",
                    )
            self.functions += len(declarations)
            self.builtin.extend(k for k in tool if k not in ("functionDeclarations",))
            text = to_json(tool)
            self.units.append((text, count_tokens(text.decode())))
            self.add(self.units[-1][1])

    def system(self, system: object) -> None:
        if system is None:
            return
        if not isinstance(system, dict) or not isinstance(system.get("parts"), list):
            raise WireError("Invalid value at 'system_instruction'.", param="system_instruction")
        texts = [str(p.get("text", "")) for p in system["parts"] if isinstance(p, dict)]
        self.system_text = "\n".join([self.system_text, *texts]).strip("\n")
        tokens = MESSAGE_OVERHEAD + sum(self.part(p) for p in system["parts"])
        self.units.append((to_json(system), tokens))
        self.total += MESSAGE_OVERHEAD
        self.modalities["TEXT"] = self.modalities.get("TEXT", 0) + MESSAGE_OVERHEAD

    def part(self, part: object) -> int:
        """A part's tokens (added to the totals by modality)."""
        if not isinstance(part, dict):
            raise WireError("Invalid value at 'contents[].parts[]'.")
        if "text" in part:
            tokens, kind = count_tokens(str(part["text"])), "TEXT"
        elif (data := get(part, "inlineData") or get(part, "fileData")) is not None:
            tokens, kind = MEDIA_TOKENS, modality(get(data, "mimeType"))
        elif (call := get(part, "functionCall")) is not None:
            args = to_json(call.get("args") or {}).decode()
            tokens, kind = count_tokens(str(call.get("name", ""))) + count_tokens(args), "TEXT"
        elif (result := get(part, "functionResponse")) is not None:
            response = to_json(result.get("response") or {}).decode()
            tokens, kind = (
                count_tokens(str(result.get("name", ""))) + count_tokens(response),
                "TEXT",
            )
        else:
            tokens, kind = count_tokens(to_json(part).decode()), "TEXT"
        self.add(tokens, kind)
        return tokens

    def contents(self, contents: list[Any]) -> None:
        pending = 0  # the function calls of the last model turn, to be answered
        for index, content in enumerate(contents):
            if not isinstance(content, dict):
                raise WireError(f"Invalid value at 'contents[{index}]'.")
            role = content.get("role", "user")
            if role not in _ROLES:
                raise WireError(
                    f"Please use a valid role: {', '.join(_ROLES)}.", param=f"contents[{index}]"
                )
            parts = content.get("parts")
            if not isinstance(parts, list) or not parts:
                raise WireError(
                    f"* GenerateContentRequest.contents[{index}].parts: contents.parts must "
                    "not be empty.\n",
                    param=f"contents[{index}].parts",
                )
            # Cache units are parts (Gemini caches token prefixes, not whole turns).
            self.add(MESSAGE_OVERHEAD)
            self.units.append((str(role).encode(), MESSAGE_OVERHEAD))
            for part in parts:
                self.units.append((to_json(part), self.part(part)))
            calls = sum(1 for p in parts if get(p, "functionCall") is not None)
            answers = sum(1 for p in parts if get(p, "functionResponse") is not None)
            if pending and role == "user" and answers and answers != pending:
                raise WireError(
                    "Please ensure that the number of function response parts is equal to "
                    "the number of function call parts of the function call turn.",
                    param=f"contents[{index}]",
                )
            pending = calls if role == "model" else 0
            self.calls += calls
            texts = [str(p["text"]) for p in parts if "text" in p and not p.get("thought")]
            if role == "user" and texts:
                self.last_user = "\n".join(texts)
            self.after_tool_result = role == "user" and answers > 0

    def cache_prefixes(self, req: GeminiRequest, fixed: int) -> None:
        """Implicit caching: each prefix ending at a content of at least
        :data:`CACHE_MIN_TOKENS` may be read back; every one is written."""
        hasher = PrefixHasher(model_id(self.model))
        total = 0
        for payload, tokens in self.units:
            hasher.update(payload)
            total += tokens
            if total >= CACHE_MIN_TOKENS and total > fixed:
                digest = hasher.checkpoint()
                req.cache_candidates.append((digest, total))
                req.cache_writes.append(digest)

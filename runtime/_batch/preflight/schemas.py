"""What each provider accepts of a request body, as its API reference states it: the
names and JSON schemas of the tools and of the output, and the service tiers. The body
checked is the one the adapter would send (`request_body`), so these rules see the wire
and write none of it.

OpenAI (Chat Completions and Responses):
- a function's or a response format's name: `^[a-zA-Z0-9_-]{1,64}$`; at most 128 tools;
- a function's parameters: a JSON schema of `type: "object"`; every array schema in
  them has `items` (else "array schema missing items");
- strict schemas (`strict: true`, Structured Outputs): the root an object (not `anyOf`);
  every object `additionalProperties: false` and every property in `required`; none of
  `allOf`, `oneOf`, `not`, `if`/`then`/`else`, `dependentRequired`, `dependentSchemas`;
  no `$ref` with other keywords beside it; at most 5,000 object properties and 10
  levels of nesting; at most 1,000 enum values, and 15,000 characters over the values
  of one enum of more than 250 strings; at most 120,000 characters over all property
  names, definition names, enum and const values;
- `service_tier` one of auto, default, flex, scale, priority (on OpenAI's own API:
  a compatible server names its own).

Anthropic (Messages):
- a tool's name: `^[a-zA-Z0-9_-]{1,128}$`; its `input_schema` of `type: "object"`;
- strict tools: every object `additionalProperties: false`; no numeric bounds
  (`minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf`), no
  string lengths (`minLength`, `maxLength`), no array bounds but `minItems` 0 or 1
  (`maxItems`, `uniqueItems`), no recursive schema, no `$ref` outside the schema;
- `service_tier` "auto" or "standard_only".
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TypeGuard, get_args

from ...models.tiers import AnthropicTier, OpenAITier
from .problems import Problem

__all__ = ["body_problems"]

_OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_ANTHROPIC_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_OPENAI_MAX_TOOLS = 128
_OPENAI_TIERS = (*get_args(OpenAITier), "scale")
_ANTHROPIC_TIERS = get_args(AnthropicTier)
_OPENAI_HOST = "api.openai.com"

_STRICT_UNSUPPORTED = (
    "allOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
)
# What may stand beside a `$ref` (definitions it points into), unlike keywords.
_REF_COMPANIONS = frozenset({"$ref", "$defs", "definitions"})
_MAX_PROPERTIES = 5000
_MAX_DEPTH = 10
_MAX_ENUM_VALUES = 1000
_MAX_ENUM_CHARS = 15_000  # one enum of more than _LONG_ENUM string values
_LONG_ENUM = 250
_MAX_CHARS = 120_000

_ANTHROPIC_UNSUPPORTED = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "maxItems",
    "uniqueItems",
)


def body_problems(provider: str, base_url: str, body: dict[str, Any], where: str) -> list[Problem]:
    """What `provider` would refuse in `body` (a request to `base_url`)."""
    if provider == "openai":
        return _openai(body, where, official=_OPENAI_HOST in base_url)
    if provider == "anthropic":
        return _anthropic(body, where)
    return []


# -- OpenAI ---------------------------------------------------------------------------


def _openai(body: dict[str, Any], where: str, official: bool) -> list[Problem]:
    problems: list[Problem] = []
    tools = [t for t in body.get("tools") or () if isinstance(t, dict)]
    functions = [t for t in tools if t.get("type", "function") == "function"]
    if len(tools) > _OPENAI_MAX_TOOLS:
        problems.append(
            Problem(
                f"{where}: tools",
                f"{len(tools)} tools; OpenAI takes at most {_OPENAI_MAX_TOOLS}",
                "give the agent fewer tools",
            )
        )
    for tool in functions:
        # Chat Completions nests the function; Responses puts it flat.
        function = tool["function"] if isinstance(tool.get("function"), dict) else tool
        problems.extend(_openai_function(function, where))
    response = _openai_format(body)
    if response is not None:
        problems.extend(_openai_format_problems(response, where))
    if official:
        problems.extend(_tier(body, where, "OpenAI", _OPENAI_TIERS))
    return problems


def _openai_function(function: dict[str, Any], where: str) -> list[Problem]:
    at = f"{where}: tool {function.get('name')!r}"
    parameters = function.get("parameters")
    strict = function.get("strict") is True
    problems = _openai_schema(function.get("name"), parameters, strict, at, "parameters")
    for path, node in _nodes(parameters) if _is_object_schema(parameters) else ():
        if _is_array(node) and "items" not in node and "prefixItems" not in node:
            problems.append(
                Problem(
                    f"{at} parameters{path}",
                    "an array schema without `items`: OpenAI refuses it",
                    "say what the list holds (e.g. list[str], not list)",
                )
            )
    return problems


def _openai_format(body: dict[str, Any]) -> dict[str, Any] | None:
    """The `json_schema` response format of a body, either wire's."""
    chat = body.get("response_format")
    if isinstance(chat, dict) and chat.get("type") == "json_schema":
        schema = chat.get("json_schema")
        return schema if isinstance(schema, dict) else {}
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        return fmt
    return None


def _openai_format_problems(response: dict[str, Any], where: str) -> list[Problem]:
    name, strict = response.get("name"), response.get("strict") is True
    at = f"{where}: output type {name!r}"
    return _openai_schema(name, response.get("schema"), strict, at, "schema")


def _openai_schema(name: Any, schema: Any, strict: bool, at: str, part: str) -> list[Problem]:
    """A named schema as OpenAI takes it: the name's pattern, an object (a function's
    parameters always, an output's when strict), and strict mode's subset when asked."""
    problems = _name(name, _OPENAI_NAME, 64, at, "OpenAI")
    label = f"{at} {part}" + (" (strict)" if strict else "")
    if (strict or part == "parameters") and not _is_object_schema(schema):
        problems.append(_not_object(label, schema, "OpenAI"))
    elif strict:
        problems.extend(_strict(schema, label))
    return problems


def _strict(schema: dict[str, Any], where: str) -> list[Problem]:
    """OpenAI's Structured Outputs subset (see the module docstring)."""
    problems: list[Problem] = []
    tally = _Tally()
    for path, node in _nodes(schema, tally=tally):
        at = f"{where}{path}"
        for keyword in _STRICT_UNSUPPORTED:
            if keyword in node:
                problems.append(
                    Problem(
                        at,
                        f"`{keyword}` is not supported in strict mode",
                        "express it with anyOf, or send the schema without strict",
                    )
                )
        others = ", ".join(sorted(set(node) - _REF_COMPANIONS))
        if "$ref" in node and others:
            problems.append(
                Problem(
                    at,
                    f"`$ref` with other keywords beside it ({others})",
                    "move them into the referenced definition, or inline it",
                )
            )
        if _is_object(node):
            problems.extend(_strict_object(node, at))
    problems.extend(tally.problems(where))
    return problems


def _strict_object(node: dict[str, Any], at: str) -> list[Problem]:
    problems = []
    if node.get("additionalProperties") is not False:
        problems.append(
            Problem(
                at,
                "an object without `additionalProperties: false`",
                'set it (pydantic: model_config = ConfigDict(extra="forbid"))',
            )
        )
    properties = node.get("properties") or {}
    missing = sorted(set(properties) - set(node.get("required") or ()))
    if missing:
        problems.append(
            Problem(
                at,
                f"properties not in `required`: {', '.join(missing)}",
                "make every property required (an optional one: a type with null, no default)",
            )
        )
    return problems


@dataclass
class _Tally:
    """The sizes OpenAI limits over a whole strict schema."""

    properties: int = 0
    depth: int = 0
    enum_values: int = 0
    chars: int = 0
    long_enums: list[str] = field(default_factory=list)

    def node(self, node: dict[str, Any], path: str, depth: int) -> None:
        if _is_object(node):
            self.depth = max(self.depth, depth)
            properties = node.get("properties") or {}
            self.properties += len(properties)
            self.chars += sum(len(str(name)) for name in properties)
        for key in ("$defs", "definitions"):
            self.chars += sum(len(str(name)) for name in node.get(key) or {})
        enum = node.get("enum")
        if isinstance(enum, list):
            self.enum_values += len(enum)
            strings = [v for v in enum if isinstance(v, str)]
            self.chars += sum(len(v) for v in strings)
            if len(strings) > _LONG_ENUM and sum(map(len, strings)) > _MAX_ENUM_CHARS:
                self.long_enums.append(path or "(root)")
        if isinstance(node.get("const"), str):
            self.chars += len(node["const"])

    def problems(self, where: str) -> list[Problem]:
        found = []
        limits = (
            (self.properties, _MAX_PROPERTIES, "object properties"),
            (self.depth, _MAX_DEPTH, "levels of nesting"),
            (self.enum_values, _MAX_ENUM_VALUES, "enum values"),
            (self.chars, _MAX_CHARS, "characters of names, enum and const values"),
        )
        for count, limit, what in limits:
            if count > limit:
                found.append(
                    Problem(
                        where,
                        f"{count:,} {what}; strict schemas allow at most {limit:,}",
                        "make the schema smaller",
                    )
                )
        for path in self.long_enums:
            found.append(
                Problem(
                    f"{where}{path}",
                    f"an enum of more than {_LONG_ENUM} strings over {_MAX_ENUM_CHARS:,} "
                    "characters",
                    "shorten its values, or make it a string",
                )
            )
        return found


# -- Anthropic ------------------------------------------------------------------------


def _anthropic(body: dict[str, Any], where: str) -> list[Problem]:
    problems: list[Problem] = []
    for tool in body.get("tools") or ():
        server_tool = isinstance(tool, dict) and "type" in tool and "input_schema" not in tool
        if not isinstance(tool, dict) or server_tool:
            continue  # a server tool (web search, ...): no schema of ours
        name = tool.get("name")
        at = f"{where}: tool {name!r}"
        problems.extend(_name(name, _ANTHROPIC_NAME, 128, at, "Anthropic"))
        schema = tool.get("input_schema")
        if not _is_object_schema(schema):
            problems.append(_not_object(f"{at} input_schema", schema, "Anthropic"))
        elif tool.get("strict") is True:
            problems.extend(_anthropic_strict(schema, f"{at} input_schema (strict)"))
    problems.extend(_tier(body, where, "Anthropic", _ANTHROPIC_TIERS))
    return problems


def _anthropic_strict(schema: dict[str, Any], where: str) -> list[Problem]:
    problems = []
    for path, node in _nodes(schema, recursion=True):
        at = f"{where}{path}"
        for keyword in _ANTHROPIC_UNSUPPORTED:
            if keyword in node:
                problems.append(
                    Problem(at, f"`{keyword}` is not supported by strict tools", "leave it out")
                )
        if node.get("minItems") not in (None, 0, 1):
            problems.append(
                Problem(at, "`minItems` other than 0 or 1 in a strict tool", "leave it out")
            )
        ref = node.get("$ref")
        if ref == _RECURSIVE:
            problems.append(Problem(at, "a recursive schema: strict tools refuse it", "unroll it"))
        elif isinstance(ref, str) and not ref.startswith("#"):
            problems.append(Problem(at, f"an external `$ref` ({ref})", "inline it"))
        if _is_object(node) and node.get("additionalProperties") is not False:
            problems.append(
                Problem(
                    at,
                    "an object without `additionalProperties: false`",
                    'set it (pydantic: model_config = ConfigDict(extra="forbid"))',
                )
            )
    return problems


# -- shared ---------------------------------------------------------------------------


def _tier(body: dict[str, Any], where: str, provider: str, known: tuple[str, ...]) -> list[Problem]:
    tier = body.get("service_tier")
    if tier is None or tier in known:
        return []
    return [
        Problem(
            f"{where}: service_tier",
            f"{tier!r} is not a service tier {provider} has ({', '.join(known)})",
            f"give one of {', '.join(known)}, or leave service_tier out",
        )
    ]


def _name(name: Any, pattern: re.Pattern[str], most: int, at: str, provider: str) -> list[Problem]:
    if isinstance(name, str) and pattern.match(name):
        return []
    return [
        Problem(
            at,
            f"{provider} takes names of letters, digits, _ and - (1 to {most})",
            "rename it (tool(name=...), or the output type's class)",
        )
    ]


def _not_object(at: str, schema: Any, provider: str) -> Problem:
    got: Any = type(schema).__name__
    if isinstance(schema, dict):
        got = schema.get("type") or next((k for k in ("anyOf", "oneOf") if k in schema), None)
    return Problem(
        at,
        f'{provider} takes a JSON schema of type "object" here, not {got!r}',
        "wrap the value in an object (a pydantic model with one field)",
    )


def _is_object_schema(schema: Any) -> TypeGuard[dict[str, Any]]:
    """An object schema, or a reference to one (pydantic's root of a recursive model)."""
    if not isinstance(schema, dict):
        return False
    ref = schema.get("$ref")
    target = _resolve(schema, ref) if isinstance(ref, str) else schema
    return target is not None and target.get("type") == "object"


def _is_object(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in node


def _is_array(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "array" or (isinstance(kind, list) and "array" in kind)


_RECURSIVE = "(recursive)"  # what `_nodes` puts in place of a $ref back into its own path
_CHILD_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_CHILDREN = ("items", "additionalProperties", "not", "if", "then", "else")


def _nodes(
    schema: dict[str, Any], *, tally: _Tally | None = None, recursion: bool = False
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every subschema once, with its path (" > properties > a"), following local
    `$ref`s into their definitions (the nesting counted through them). A `$ref` back
    into its own path is recursion: yielded as {"$ref": _RECURSIVE} when asked."""
    seen: set[int] = set()

    def walk(node: Any, path: str, depth: int, refs: tuple[str, ...]) -> Iterator[Any]:
        if not isinstance(node, dict):
            return
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            if ref in refs:
                if recursion:
                    yield path, {"$ref": _RECURSIVE}
                return
            target = _resolve(schema, ref)
            if target is not None:
                yield from walk(target, path, depth, (*refs, ref))
        if id(node) in seen and not isinstance(ref, str):
            return
        seen.add(id(node))
        level = depth + 1 if _is_object(node) else depth
        if tally is not None:
            tally.node(node, path, level)
        yield path, node
        properties = node.get("properties")
        for name, child in properties.items() if isinstance(properties, dict) else ():
            yield from walk(child, f"{path} > {name}", level, refs)
        for key in _CHILDREN:
            yield from walk(node.get(key), f"{path} > {key}", level, refs)
        for key in _CHILD_LISTS:
            for i, child in enumerate(node.get(key) or ()):
                yield from walk(child, f"{path} > {key}[{i}]", level, refs)

    yield from walk(schema, "", 0, ())
    for key in ("$defs", "definitions"):
        for name, child in (schema.get(key) or {}).items():
            if isinstance(child, dict) and id(child) not in seen:
                yield from walk(child, f" > {key} > {name}", 1, ())


def _resolve(root: dict[str, Any], ref: str) -> dict[str, Any] | None:
    node: Any = root
    for part in ref.lstrip("#").strip("/").split("/"):
        if not part:
            continue
        key = part.replace("~1", "/").replace("~0", "~")
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None

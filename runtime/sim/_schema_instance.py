"""Build a JSON value that satisfies a JSON schema (the subset pydantic and providers use).

Handles ``type`` (including lists such as ``["string", "null"]``), ``properties`` and
``required``, ``enum``, ``const``, ``anyOf``/``oneOf`` (first branch), ``allOf``
(merged), ``$ref`` into ``$defs``/``definitions``, ``prefixItems``, ``items``,
``minItems``/``maxItems``, ``minLength``/``maxLength``, numeric bounds and
``multipleOf``, and the common string formats. ``pattern`` is not honoured.
"""

from __future__ import annotations

import math
from typing import Any

# Beyond this depth only required properties and minItems items are generated, so
# recursive models (a tree node with optional children) terminate.
_FULL_DEPTH = 3
_MAX_DEPTH = 32

_FORMATS = {
    "date": "2024-01-01",
    "date-time": "2024-01-01T00:00:00Z",
    "time": "00:00:00Z",
    "duration": "P1D",
    "email": "user@example.com",
    "idn-email": "user@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "iri": "https://example.com/",
    "uri-reference": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "hostname": "example.com",
    "ipv4": "127.0.0.1",
    "ipv6": "::1",
}


def schema_instance(schema: dict[str, Any]) -> Any:
    """A deterministic value that validates against ``schema``."""
    return _Generator(schema).value(schema, 0)


class _Generator:
    def __init__(self, root: dict[str, Any]) -> None:
        self._root = root

    def value(self, schema: Any, depth: int) -> Any:
        if not isinstance(schema, dict):
            return None  # ``true`` / ``{}``-like schemas accept anything
        if depth > _MAX_DEPTH:
            raise ValueError("schema recursion too deep to build an instance")
        schema = self._flatten(schema)
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return schema["enum"][0]
        for key in ("anyOf", "oneOf"):
            if schema.get(key):
                return self.value(self._merge(schema, schema[key][0], key), depth + 1)
        kind = _pick_type(schema)
        if kind == "object":
            return self._object(schema, depth)
        if kind == "array":
            return self._array(schema, depth)
        if kind == "string":
            return _string(schema)
        if kind == "integer":
            return _integer(schema)
        if kind == "number":
            return _number(schema)
        if kind == "boolean":
            return True
        return None

    def _flatten(self, schema: dict[str, Any]) -> dict[str, Any]:
        """Resolve ``$ref`` and merge ``allOf`` into one schema."""
        while "$ref" in schema:
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**self._resolve(schema["$ref"]), **rest}
        if "allOf" in schema:
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                merged = _merge_into(merged, self._flatten(part))
            schema = merged
        return schema

    def _merge(self, parent: dict[str, Any], branch: Any, key: str) -> Any:
        if not isinstance(branch, dict):
            return branch
        rest = {k: v for k, v in parent.items() if k != key}
        return _merge_into(rest, self._flatten(branch))

    def _resolve(self, ref: str) -> dict[str, Any]:
        if not ref.startswith("#"):
            raise ValueError(f"only local $ref is supported, got {ref!r}")
        node: Any = self._root
        for part in ref.lstrip("#").strip("/").split("/"):
            if part:
                node = node[part.replace("~1", "/").replace("~0", "~")]
        if not isinstance(node, dict):
            raise ValueError(f"$ref {ref!r} does not point to a schema")
        return node

    def _object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        props: dict[str, Any] = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        out: dict[str, Any] = {}
        for name, sub in props.items():
            if name in required or depth < _FULL_DEPTH:
                out[name] = self.value(sub, depth + 1)
        for name in required - out.keys():
            out[name] = None  # required but undeclared: any value will do
        return out

    def _array(self, schema: dict[str, Any], depth: int) -> list[Any]:
        prefix = schema.get("prefixItems") or []
        low = int(schema.get("minItems", 0))
        high = schema.get("maxItems")
        count = max(low, len(prefix), 1 if depth < _FULL_DEPTH else 0)
        if high is not None:
            count = min(count, int(high))
        items = schema.get("items")
        out: list[Any] = []
        for i in range(count):
            sub = prefix[i] if i < len(prefix) else items
            value = self.value(sub, depth + 1)
            if schema.get("uniqueItems") and isinstance(value, str):
                value = f"{value}{i}" if i else value
            out.append(value)
        return out


def _merge_into(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if key == "properties" and "properties" in merged:
            merged["properties"] = {**merged["properties"], **value}
        elif key == "required" and "required" in merged:
            merged["required"] = list(dict.fromkeys([*merged["required"], *value]))
        else:
            merged.setdefault(key, value)
    return merged


def _pick_type(schema: dict[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        non_null = [k for k in kind if k != "null"]
        return str(non_null[0]) if non_null else "null"
    if kind is not None:
        return str(kind)
    if "properties" in schema or "required" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    return None


def _string(schema: dict[str, Any]) -> str:
    text = _FORMATS.get(str(schema.get("format")), "string")
    low = int(schema.get("minLength", 0))
    if len(text) < low:
        text = text + "x" * (low - len(text))
    high = schema.get("maxLength")
    if high is not None:
        text = text[: int(high)]
    return text


def _integer(schema: dict[str, Any]) -> int:
    low = schema.get("minimum")
    if "exclusiveMinimum" in schema:
        low = math.floor(schema["exclusiveMinimum"]) + 1
    high = schema.get("maximum")
    if "exclusiveMaximum" in schema:
        high = math.ceil(schema["exclusiveMaximum"]) - 1
    value = math.ceil(low) if low is not None else 0
    if high is not None and value > high:
        value = math.floor(high)
    step = schema.get("multipleOf")
    if step:
        value = math.ceil(value / step) * int(step)
    return int(value)


def _number(schema: dict[str, Any]) -> float:
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    if low is None:
        value = 0.0 if high is None or high > 0 else float(high) - 1.0
    elif high is None:
        value = float(low) + (1.0 if "exclusiveMinimum" in schema else 0.0)
    else:
        value = (float(low) + float(high)) / 2
    step = schema.get("multipleOf")
    if step:
        value = math.ceil(value / step) * float(step)
    return value

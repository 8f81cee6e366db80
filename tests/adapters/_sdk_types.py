"""Check a JSON request body against an official SDK request type (a TypedDict), strictly.

Two independent gates; a body conforms only if it passes both.

1. **pydantic** (`sdk_validate`): `TypeAdapter(<TypedDict>).validate_python(body, strict=True)`,
   then every lazily validated `Iterable[...]` field (pydantic returns a `ValidatorIterator`
   that checks items only when iterated) is drained recursively, so nested items are
   checked too. This is the SDK's own reading of its types, but it is not enough on its
   own: pydantic silently drops keys a TypedDict does not declare, and a union accepts a
   dict that fits one of the SDK's response *models* mixed into some param unions.

2. **A strict structural walk** (`sdk_errors`) over the resolved annotations: TypedDicts
   (required-ness from `Required`/`NotRequired`, falling back to the class's totality:
   the SDK modules use `from __future__ import annotations`, so `__required_keys__` is
   wrong for string-annotated `Required[...]`), `Literal`, `Union`/`Optional`, lists for
   `Iterable`/`Sequence`/`List`, `Dict`, `object` (any JSON value) and scalars, with no
   coercion (`True` is not an int, `"1"` is not a number). Any key a TypedDict does not
   declare is an error (unless the SDK marks that TypedDict `extra="allow"`), at every
   depth; a union value must fit at least one member *with no extra keys*. Response
   models (pydantic `BaseModel`s, e.g. Anthropic's `ContentBlock` inside
   `MessageContentParam`) and file inputs (`IO`, `PathLike`, `bytes`) are not JSON request
   shapes and never match. An annotation form the walker does not know raises, so a new
   SDK construct cannot be accepted by accident.
"""

from __future__ import annotations

import collections.abc
import functools
import types
import typing
from typing import Any

import pydantic
import typing_extensions as te

__all__ = ["assert_conforms", "sdk_errors", "sdk_validate"]

_REQUIRED = {te.Required}
_NOT_REQUIRED = {te.NotRequired}
_QUALIFIERS = _REQUIRED | _NOT_REQUIRED | {te.ReadOnly}
_LITERAL = {typing.Literal, te.Literal}
_UNION = {typing.Union, types.UnionType}
_ARRAYS = {
    list,
    collections.abc.Iterable,
    collections.abc.Sequence,
    collections.abc.Collection,
}
_MAPPINGS = {dict, collections.abc.Mapping}


@functools.cache
def _adapter(td: type) -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(td)


def _drain(value: Any) -> Any:
    """Force pydantic's lazy `Iterable` validators, at every depth."""
    if isinstance(value, dict):
        return {k: _drain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, collections.abc.Iterator)):
        return [_drain(v) for v in value]
    return value


def sdk_validate(body: Any, td: type) -> Any:
    """Validate with pydantic (strict) and drain every lazy iterable; raises ValidationError."""
    return _drain(_adapter(td).validate_python(body, strict=True))


@functools.cache
def _fields(td: type) -> tuple[dict[str, tuple[Any, bool]], bool]:
    """{wire key: (type, required)} of a TypedDict, and whether it allows extra keys."""
    hints = te.get_type_hints(td, include_extras=True)
    fields: dict[str, tuple[Any, bool]] = {}
    for name, hint in hints.items():
        required = name in td.__required_keys__
        key = name
        while True:
            origin = te.get_origin(hint)
            if origin in _QUALIFIERS:
                if origin in _REQUIRED:
                    required = True
                elif origin in _NOT_REQUIRED:
                    required = False
                hint = te.get_args(hint)[0]
            elif origin is te.Annotated:
                for meta in hint.__metadata__:
                    key = getattr(meta, "alias", None) or key
                hint = te.get_args(hint)[0]
            else:
                break
        fields[key] = (hint, required)
    config = getattr(td, "__pydantic_config__", None) or {}
    return fields, config.get("extra") == "allow"


def _is_json(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, list):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or repr(tp)


def _literal_keys(td: type) -> dict[str, tuple[Any, ...]]:
    fields, _ = _fields(td)
    return {k: te.get_args(t) for k, (t, _r) in fields.items() if te.get_origin(t) in _LITERAL}


def _union_errors(value: Any, members: tuple[Any, ...], path: str) -> list[str]:
    failures: list[tuple[Any, list[str]]] = []
    for member in members:
        errors = _errors(value, member, path)
        if not errors:
            return []
        failures.append((member, errors))
    # For a tagged union, report only the members whose tags the value carries.
    if isinstance(value, dict):
        tagged = [
            (m, e)
            for m, e in failures
            if te.is_typeddict(m)
            and (tags := _literal_keys(m))
            and all(k in value and value[k] in v for k, v in tags.items())
        ]
        failures = tagged or failures
    # And skip members that fail on the value's kind alone when another got further.
    deeper = [(m, e) for m, e in failures if not (len(e) == 1 and e[0].startswith(path + ": "))]
    failures = deeper or failures
    detail = "; ".join(f"as {_name(m)}: {' | '.join(e[:3])}" for m, e in failures[:4])
    return [f"{path}: fits no member of the union ({detail})"]


def _typeddict_errors(value: Any, td: type, path: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path}: expected an object ({td.__name__}), got {type(value).__name__}"]
    fields, extra_allowed = _fields(td)
    errors: list[str] = []
    for key in value:
        if key not in fields and not extra_allowed:
            errors.append(f"{path}.{key}: key not declared by {td.__name__}")
    for key, (tp, required) in fields.items():
        if key in value:
            errors.extend(_errors(value[key], tp, f"{path}.{key}"))
        elif required:
            errors.append(f"{path}.{key}: required by {td.__name__}, missing")
    return errors


def _scalar_errors(value: Any, tp: Any, path: str) -> list[str] | None:
    """Errors for a plain class annotation, or None when `tp` is not a scalar."""
    if tp is type(None):
        ok = value is None
    elif tp is str:
        ok = isinstance(value, str)
    elif tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        return None
    return [] if ok else [f"{path}: expected {_name(tp)}, got {type(value).__name__} {value!r}"]


def _errors(value: Any, tp: Any, path: str) -> list[str]:
    origin = te.get_origin(tp)
    args = te.get_args(tp)
    if tp is object or tp is Any:
        return [] if _is_json(value) else [f"{path}: not a JSON value: {value!r}"]
    if origin in _QUALIFIERS or origin is te.Annotated:
        return _errors(value, args[0], path)
    if origin in _LITERAL:
        if any(type(value) is type(a) and value == a for a in args):
            return []
        return [f"{path}: {value!r} is not one of {list(args)}"]
    if origin in _UNION:
        return _union_errors(value, args, path)
    if origin in _ARRAYS:
        if not isinstance(value, list):
            return [f"{path}: expected an array, got {type(value).__name__}"]
        return [e for i, item in enumerate(value) for e in _errors(item, args[0], f"{path}[{i}]")]
    if origin in _MAPPINGS:
        if not isinstance(value, dict):
            return [f"{path}: expected an object, got {type(value).__name__}"]
        key_tp, value_tp = args or (str, object)
        errors: list[str] = []
        for k, v in value.items():
            errors.extend(_errors(k, key_tp, f"{path} key"))
            errors.extend(_errors(v, value_tp, f"{path}.{k}"))
        return errors
    if te.is_typeddict(tp):
        return _typeddict_errors(value, tp, path)
    scalar = _scalar_errors(value, tp, path)
    if scalar is not None:
        return scalar
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        return [f"{path}: {tp.__name__} is an SDK response model, not a request shape"]
    if (
        origin is typing.IO
        or tp in (bytes, typing.IO)
        or (isinstance(tp, type) and tp.__module__ == "os")
    ):
        return [f"{path}: {_name(tp)} is a file input, not JSON"]
    raise TypeError(f"the checker does not know the annotation {tp!r} (at {path})")


def sdk_errors(body: Any, td: type) -> list[str]:
    """Every way `body` departs from the SDK TypedDict `td` (empty when it conforms)."""
    return _errors(body, td, "$")


def assert_conforms(body: Any, td: type) -> None:
    """Fail unless `body` passes both the pydantic gate and the strict walk."""
    errors = sdk_errors(body, td)
    assert not errors, f"body does not conform to {td.__name__}:\n  " + "\n  ".join(errors)
    try:
        sdk_validate(body, td)
    except pydantic.ValidationError as exc:
        raise AssertionError(f"pydantic rejects the body as {td.__name__}:\n{exc}") from None

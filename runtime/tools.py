"""Tools: plain functions the model may call, with a JSON schema built from their signature.

`@tool` does all the work once, at decoration time: it reads the signature and the
docstring, builds a pydantic model for the arguments and checks the name. Invoking a tool
is then one `model_validate` and one call, so the agent loop's overhead per call stays tiny.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import (
    Annotated,
    Any,
    Generic,
    ParamSpec,
    TypeGuard,
    TypeVar,
    get_args,
    get_origin,
    overload,
)

import pydantic_core
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PydanticUserError,
    TypeAdapter,
    ValidationError,
    create_model,
)
from pydantic.fields import FieldInfo

from .abort import AbortSignal
from .errors import RaygentError, ToolExecutionError
from .messages import ImagePart, TextPart
from .models.contract import ToolSpec

__all__ = [
    "Tool",
    "ToolArgumentsError",
    "ToolContext",
    "ToolResult",
    "ToolTimeoutError",
    "parse_docstring",
    "tool",
    "tool_result_content",
    "tool_result_text",
]

P = ParamSpec("P")
R = TypeVar("R")

# The rule OpenAI and Anthropic both apply to function names.
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
# extra="forbid": a model that sends an unknown argument should hear about it, not have
# it dropped silently. protected_namespaces=(): a tool may well take `model_name`.
_ARGS_CONFIG = ConfigDict(extra="forbid", protected_namespaces=())


class ToolArgumentsError(RaygentError):
    """The model called a tool with arguments that do not fit its schema.

    details: tool, issues (pydantic's error list). The message is meant for the model.
    """

    code = "TOOL_INVALID_ARGUMENTS"
    category = "tool"


class ToolTimeoutError(RaygentError):
    """A tool ran longer than its `timeout`. details: tool, timeout."""

    code = "TOOL_TIMEOUT"
    category = "tool"


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may learn about the call it serves; the agent loop builds it.

    A tool asks for it with a parameter annotated `ToolContext` (or an unannotated `ctx`).
    """

    run_id: str
    root_run_id: str
    session_id: str | None
    call_id: str
    tool_name: str
    trip_index: int
    signal: AbortSignal | None = None
    deps: Any = None


@dataclass(frozen=True)
class ToolResult:
    """A tool's result saying more than one value: `content` is what the model reads (a
    `str`, or `str` / `TextPart` / `ImagePart` items in order: images go as image parts of
    the tool result), `data` is structured and kept on the call's report
    (`ToolCallReport.data`, as JSON) for the program, not sent to the model."""

    content: str | Sequence[str | TextPart | ImagePart] = ()
    data: Any = None

    @property
    def text(self) -> str:
        """The text items joined."""
        items = [self.content] if isinstance(self.content, str) else self.content
        return "".join(i if isinstance(i, str) else i.text for i in items if _is_text(i))


_PARTS = (TextPart, ImagePart)


def _is_text(item: object) -> TypeGuard[str | TextPart]:
    return isinstance(item, (str, TextPart))


@dataclass(frozen=True, eq=False)
class Tool(Generic[P, R]):
    """A function the model may call. Build one with `@tool`; call it like the function.

    `args_model` validates the model's arguments (the context parameter is not part of
    it); `inline`, `idempotent`, `timeout`, `retries`, `num_cpus`, `resources` and
    `runtime_env` tell the executor how to run it.
    """

    fn: Callable[P, R]
    name: str
    description: str
    args_model: type[BaseModel]
    is_async: bool
    ctx_param: str | None = None
    inline: bool = False
    idempotent: bool = False
    timeout: float | None = None
    retries: int = 0
    num_cpus: float | None = None
    resources: dict[str, float] | None = None
    runtime_env: dict[str, Any] | None = None
    # Which calls wait for a human: False (none), True (all), or a policy
    # `(call, ctx) -> bool` (may be async) deciding per call.
    approval: bool | Callable[..., Any] = False
    # (field name in args_model, parameter name) where they differ: parameters named like a
    # BaseModel attribute (`json`, `schema`) or starting with "_" get an aliased field.
    _renamed: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def spec(self, compact: bool = False) -> ToolSpec:
        """The tool as the model sees it. `compact` drops descriptions, titles, examples
        and defaults (fewer tokens); validation is the same either way."""
        return self._compact_spec if compact else self._full_spec

    @functools.cached_property
    def _full_spec(self) -> ToolSpec:
        schema = self.args_model.model_json_schema()
        return ToolSpec(name=self.name, description=self.description, parameters=schema)

    @functools.cached_property
    def _compact_spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, parameters=_compact(self._full_spec.parameters))

    def validate(self, arguments: dict[str, Any] | None) -> dict[str, Any]:
        """The validated arguments as keyword arguments (without the context)."""
        if arguments is None:
            raise ToolArgumentsError(
                f"invalid arguments for tool {self.name!r}: "
                "the arguments are not a valid JSON object",
                tool=self.name,
                issues=[],
            )
        try:
            validated = self.args_model.model_validate(arguments)
        except ValidationError as exc:
            raise _arguments_error(self.name, exc) from None
        if not self._renamed:
            return dict(validated.__dict__)
        kwargs = dict(validated.__dict__)
        for field_name, param in self._renamed:
            kwargs[param] = kwargs.pop(field_name)
        return kwargs

    async def invoke(self, arguments: dict[str, Any] | None, ctx: ToolContext) -> Any:
        """Validate `arguments` and run the tool: awaited if async, in a worker thread if
        not (so it never blocks the loop), within `timeout` seconds if one is set."""
        kwargs = self.validate(arguments)
        if self.ctx_param is not None:
            kwargs[self.ctx_param] = ctx
        fn: Callable[..., Any] = self.fn
        running: Awaitable[Any] = fn(**kwargs) if self.is_async else asyncio.to_thread(fn, **kwargs)
        if self.timeout is None:
            return await running
        return await _within(running, self.timeout, self.name)


async def _within(running: Awaitable[Any], seconds: float, name: str) -> Any:
    # A sync tool's thread cannot be stopped: on timeout it runs on, unobserved.
    if sys.version_info >= (3, 11):
        # asyncio.timeout tells our deadline apart from a TimeoutError the tool raised.
        scope = asyncio.timeout(seconds)
        try:
            async with scope:
                return await running
        except TimeoutError:
            if scope.expired():
                raise _timed_out(name, seconds) from None
            raise
    try:  # Python 3.10
        return await asyncio.wait_for(running, seconds)
    except asyncio.TimeoutError:
        raise _timed_out(name, seconds) from None


def _timed_out(name: str, seconds: float) -> ToolTimeoutError:
    return ToolTimeoutError(
        f"tool {name!r} timed out after {seconds:g}s", tool=name, timeout=seconds
    )


def _arguments_error(name: str, exc: ValidationError) -> ToolArgumentsError:
    issues = exc.errors(include_url=False, include_context=False)
    problems = "; ".join(
        f"{'.'.join(str(p) for p in issue['loc']) or 'arguments'}: {issue['msg']}"
        for issue in issues
    )
    return ToolArgumentsError(
        f"invalid arguments for tool {name!r}: {problems}", tool=name, issues=issues
    )


_STRIPPED = frozenset({"description", "title", "examples", "default"})
# Keys whose values map names to schemas: a property called "title" is not a title.
_NAMED = frozenset({"properties", "$defs", "definitions", "patternProperties"})


def _compact(node: Any) -> Any:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _STRIPPED:
                continue
            if key in _NAMED and isinstance(value, dict):
                out[key] = {name: _compact(schema) for name, schema in value.items()}
            elif key in ("enum", "const"):
                out[key] = value
            else:
                out[key] = _compact(value)
        return out
    if isinstance(node, list):
        return [_compact(item) for item in node]
    return node


@overload
def tool(fn: Callable[P, R], /) -> Tool[P, R]: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    inline: bool = False,
    idempotent: bool = False,
    timeout: float | None = None,
    retries: int = 0,
    num_cpus: float | None = None,
    resources: dict[str, float] | None = None,
    runtime_env: dict[str, Any] | None = None,
    approval: bool | Callable[..., Any] = False,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    inline: bool = False,
    idempotent: bool = False,
    timeout: float | None = None,
    retries: int = 0,
    num_cpus: float | None = None,
    resources: dict[str, float] | None = None,
    runtime_env: dict[str, Any] | None = None,
    approval: bool | Callable[..., Any] = False,
) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """Make a function a tool, bare (`@tool`) or with options (`@tool(timeout=10)`).

    The schema comes from the type hints (`Annotated[..., Field(...)]` honoured) and the
    per-parameter descriptions from a Google-style `Args:` section of the docstring.
    `inline` runs the tool in the caller's process even on Ray; `timeout` is in seconds;
    `retries`, `num_cpus`, `resources` and `runtime_env` are for the Ray backend.
    `approval=True` (or a policy `(call, ctx) -> bool`) stops the run before such a call
    until it is approved (see `Agent.resume`). Raises TypeError for `*args`/`**kwargs`,
    missing type hints or an invalid name.
    """
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout must be positive, not {timeout}")
    if retries < 0:
        raise ValueError(f"retries must be >= 0, not {retries}")
    if num_cpus is not None and num_cpus < 0:
        raise ValueError(f"num_cpus must be >= 0, not {num_cpus}")
    if not isinstance(approval, bool) and not callable(approval):
        raise TypeError("approval is True, False or a policy (call, ctx) -> bool")

    def build(fn: Callable[P, R]) -> Tool[P, R]:
        if isinstance(fn, Tool):
            fn = fn.fn
        tool_name: str = getattr(fn, "__name__", "") if name is None else name
        if not _NAME.match(tool_name):
            raise TypeError(
                f"tool name {tool_name!r} is not allowed: use 1-64 letters, digits, '_' or "
                "'-' (pass name=...)"
            )
        summary, param_docs = parse_docstring(inspect.getdoc(fn))
        args_model, ctx_param, renamed = _args_model(fn, tool_name, param_docs)
        return Tool(
            fn=fn,
            name=tool_name,
            description=summary if description is None else description,
            args_model=args_model,
            is_async=_is_async(fn),
            ctx_param=ctx_param,
            inline=inline,
            idempotent=idempotent,
            timeout=timeout,
            retries=retries,
            num_cpus=num_cpus,
            resources=resources,
            runtime_env=runtime_env,
            approval=approval,
            _renamed=renamed,
        )

    return build if fn is None else build(fn)


def _is_async(fn: Callable[..., Any]) -> bool:
    # An object whose __call__ is async counts too.
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def _args_model(
    fn: Callable[..., Any], tool_name: str, param_docs: dict[str, str]
) -> tuple[type[BaseModel], str | None, tuple[tuple[str, str], ...]]:
    where = f"tool {tool_name!r}"
    signature = inspect.signature(fn)
    names = set(signature.parameters)
    namespace = _globals_of(fn)
    fields: dict[str, Any] = {}
    renamed: list[tuple[str, str]] = []
    ctx_param: str | None = None
    for param in signature.parameters.values():
        annotation = param.annotation
        if isinstance(annotation, str):  # `from __future__ import annotations`
            annotation = _resolve(annotation, namespace, where)
        if annotation is ToolContext or (annotation is param.empty and param.name == "ctx"):
            if ctx_param is not None:
                raise TypeError(f"{where}: more than one ToolContext parameter")
            ctx_param = param.name
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"{where}: *args and **kwargs cannot be described to a model")
        if param.kind is param.POSITIONAL_ONLY:
            raise TypeError(f"{where}: positional-only parameter {param.name!r} is not allowed")
        if annotation is param.empty:
            raise TypeError(f"{where}: parameter {param.name!r} has no type hint")
        doc = param_docs.get(param.name)
        if doc and not _has_description(annotation, param.default):
            annotation = Annotated[annotation, Field(description=doc)]
        field_name = param.name
        if field_name.startswith("_") or hasattr(BaseModel, field_name):
            field_name = _free_name(f"arg_{field_name.lstrip('_')}", names)
            names.add(field_name)
            annotation = Annotated[annotation, Field(alias=param.name)]
            renamed.append((field_name, param.name))
        default = ... if param.default is param.empty else param.default
        fields[field_name] = (annotation, default)
    try:
        model: type[BaseModel] = create_model(
            tool_name,
            __config__=_ARGS_CONFIG,
            __module__=getattr(fn, "__module__", None) or __name__,
            **fields,
        )
        model.model_json_schema()  # what the model is shown: a type without one fails here
    except PydanticUserError:
        raise TypeError(_undescribable(where, fields, renamed)) from None
    return model, ctx_param, tuple(renamed)


def _undescribable(where: str, fields: dict[str, Any], renamed: list[tuple[str, str]]) -> str:
    """Which parameter's type pydantic can neither validate nor describe, in words."""
    names = dict(renamed)
    for name, (annotation, _default) in fields.items():
        try:
            TypeAdapter(annotation).json_schema()
        except PydanticUserError as exc:
            shown = getattr(annotation, "__name__", None) or repr(annotation)
            return (
                f"{where}: parameter {names.get(name, name)!r} has a type the model cannot "
                f"be given a schema for ({shown}): use JSON-like types (str, int, float, "
                f"bool, lists, dicts, pydantic models, dataclasses) ({type(exc).__name__})"
            )
    return f"{where}: its parameters cannot be described to a model"


def _globals_of(fn: Callable[..., Any]) -> dict[str, Any]:
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    target = inspect.unwrap(target)
    if not inspect.isfunction(target) and not inspect.ismethod(target):
        target = type(target).__call__  # a callable object
    namespace: dict[str, Any] = getattr(target, "__globals__", {})
    return namespace


def _resolve(annotation: str, namespace: dict[str, Any], where: str) -> Any:
    # Only the parameters' hints are resolved: a return type imported under TYPE_CHECKING
    # is fine. Evaluating the string is what inspect.get_annotations(eval_str=True) does.
    try:
        return eval(annotation, namespace)
    except Exception as exc:
        raise TypeError(
            f"{where}: cannot resolve the type hint {annotation!r} ({exc}); define the types "
            "it uses at module level"
        ) from None


def _free_name(base: str, taken: set[str]) -> str:
    candidate = base
    while candidate in taken:
        candidate += "_"
    return candidate


def _has_description(annotation: Any, default: Any) -> bool:
    if isinstance(default, FieldInfo) and default.description:
        return True
    if get_origin(annotation) is Annotated:
        return any(isinstance(m, FieldInfo) and m.description for m in get_args(annotation)[1:])
    return False


# Google-style section headers ("Args:"); numpy-style headers are underlined instead.
_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters|"
    r"Returns?|Yields?|Raises|Examples?|Notes?|Attributes|Warnings?|See Also|References|"
    r"Todo)\s*:\s*$"
)
_ARGS_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments):$")
_ARG_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_ENTRY = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")
_SPHINX_FIELD = re.compile(r"^:(param|type|returns?|rtype|raises?)\b")
_UNDERLINE = re.compile(r"^\s*-{3,}\s*$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The summary (everything before the first section) and the per-parameter
    descriptions of a Google-style `Args:` section (or Sphinx `:param x:` lines)."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    end = len(lines)
    for i, line in enumerate(lines):
        stripped = line.strip()
        underlined = i + 1 < len(lines) and _UNDERLINE.match(lines[i + 1]) is not None
        if _SECTION.match(stripped) or _SPHINX_FIELD.match(stripped) or (stripped and underlined):
            end = i
            break
    return "\n".join(lines[:end]).strip(), _param_docs(lines[end:])


def _param_docs(lines: list[str]) -> dict[str, str]:
    docs: dict[str, str] = {}
    current: str | None = None
    header_indent: int | None = None  # set while inside an Args section
    entry_indent: int | None = None
    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        indent = len(line) - len(line.lstrip())
        if _ARGS_SECTION.match(stripped):
            header_indent, entry_indent, current = indent, None, None
            continue
        if sphinx := _SPHINX_ENTRY.match(stripped):
            header_indent, current = None, sphinx[1]
            docs[current], entry_indent = sphinx[2].strip(), indent
            continue
        if header_indent is not None and indent <= header_indent:
            header_indent = current = None  # another section starts
        if header_indent is not None and entry_indent in (None, indent):
            entry = _ARG_ENTRY.match(stripped)
            if entry:
                entry_indent, current = indent, entry[1]
                docs[current] = entry[2].strip()
                continue
        if current is not None and entry_indent is not None and indent > entry_indent:
            docs[current] = f"{docs[current]} {stripped}".strip()
        elif header_indent is None:
            current = None
    return docs


def tool_result_content(value: Any, name: str = "tool") -> tuple[list[TextPart | ImagePart], Any]:
    """A tool's return value as the parts of its tool message, and its structured data.

    A `ToolResult` gives both; an `ImagePart` or a `TextPart`, or a list or tuple holding
    one, goes as parts in order (its other items as text, as `tool_result_text` writes
    them); anything else is one text part. The data is JSON (ToolExecutionError if not).
    """
    if isinstance(value, ToolResult):
        data = None if value.data is None else json.loads(tool_result_text(value.data, name))
        items = [value.content] if isinstance(value.content, str) else value.content
        return _parts(items, name), data
    if isinstance(value, _PARTS):
        return [value], None
    if isinstance(value, (list, tuple)) and any(isinstance(v, _PARTS) for v in value):
        return _parts(value, name), None
    return _parts([value], name), None


def _parts(items: Sequence[Any], name: str) -> list[TextPart | ImagePart]:
    parts: list[TextPart | ImagePart] = []
    for item in items:
        if not isinstance(item, _PARTS):
            text = tool_result_text(item, name)
            if not text:
                continue
            item = TextPart(text=text)
        parts.append(item)
    return parts


def tool_result_text(value: Any, name: str = "tool") -> str:
    """A tool's return value as text for the model: a str as is, anything else as JSON.

    JSON as pydantic writes it: pydantic models and dataclasses as objects, dates, times
    and datetimes in ISO 8601, timedeltas as ISO durations, Decimal, UUID and Path as
    strings, an Enum as its value, sets and tuples as arrays, bytes as UTF-8 text (as
    URL-safe base64 when any are not UTF-8). A value with no JSON form raises ToolExecutionError
    naming the type (the model gets that as the tool's error, never a `repr`).
    """
    if isinstance(value, str):
        return value
    unknown: list[type[Any]] = []

    def refuse(item: Any) -> Any:
        if isinstance(item, PurePath):  # pydantic knows only Path
            return str(item)
        unknown.append(type(item))
        raise TypeError(type(item).__name__)

    try:
        return pydantic_core.to_json(value, fallback=refuse).decode()
    except pydantic_core.PydanticSerializationError as exc:
        reason = str(exc)
    if not unknown:
        try:  # bytes that are not UTF-8: all bytes as base64 instead
            return pydantic_core.to_json(value, bytes_mode="base64").decode()
        except pydantic_core.PydanticSerializationError:
            pass
    raise ToolExecutionError(_not_json(value, unknown, reason, name), tool=name)


def _not_json(value: Any, unknown: list[type[Any]], reason: str, name: str) -> str:
    outer = type(value).__name__
    if unknown and unknown[0] is not type(value):
        what = f"a {outer} holding a value of type {unknown[0].__name__}"
    elif unknown:
        what = f"a value of type {outer}"
    else:
        what = f"a value of type {outer} ({reason.removeprefix('Error serializing to JSON: ')})"
    return (
        f"tool {name!r} returned {what} that cannot be sent as JSON; return a str, a dict, "
        "a list, a dataclass or a pydantic model"
    )

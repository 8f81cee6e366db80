"""An MCP server's tool as a raygent tool, and its results as what the model reads."""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from mcp.types import CallToolResult
from pydantic import BaseModel, ConfigDict

from ..errors import ToolExecutionError
from ..models.contract import ToolSpec
from ..tools import Tool, ToolArgumentsError, ToolContext

__all__ = ["MCPTool", "local_name", "result_value"]

# Call: (the server's tool name, validated arguments, the call's context) -> its value.
Call = Callable[[str, dict[str, Any], ToolContext], Awaitable[Any]]
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


class _AnyArguments(BaseModel):
    # Never used to validate (the server's schema is): Tool wants a model.
    model_config = ConfigDict(extra="allow")


def local_name(prefix: str | None, name: str) -> str:
    """The name the model sees: the prefix, then the server's name made provider-safe."""
    return _UNSAFE.sub("_", f"{prefix or ''}{name}")[:64] or "_"


@dataclass(frozen=True, eq=False)
class MCPTool(Tool[..., Any]):
    """A tool of an MCP server: its schema as the server sent it, validated here."""

    remote_name: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)
    call: Call | None = field(default=None, repr=False)

    @functools.cached_property
    def _full_spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.input_schema)

    @functools.cached_property
    def _validator(self) -> Any:
        cls = jsonschema.validators.validator_for(self.input_schema)
        return cls(self.input_schema)

    def validate(self, arguments: dict[str, Any] | None) -> dict[str, Any]:
        if arguments is None:
            return super().validate(None)  # the not-an-object error
        issues = [
            {"loc": list(e.absolute_path), "msg": e.message}
            for e in self._validator.iter_errors(arguments)
        ]
        if issues:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in i['loc']) or 'arguments'}: {i['msg']}" for i in issues
            )
            raise ToolArgumentsError(
                f"invalid arguments for tool {self.name!r}: {problems}",
                tool=self.name,
                issues=issues,
            )
        return dict(arguments)

    async def invoke(self, arguments: dict[str, Any] | None, ctx: ToolContext) -> Any:
        kwargs = self.validate(arguments)
        assert self.call is not None
        return await self.call(self.remote_name, kwargs, ctx)


def make_tool(
    remote: Any, prefix: str | None, approval: bool | Callable[..., Any], call: Call
) -> MCPTool:
    """A raygent tool for the SDK's `Tool` listing entry."""
    schema = dict(remote.input_schema or {"type": "object"})

    def unused(**kwargs: Any) -> Any:  # Tool wants a function; invoke() is the call
        raise NotImplementedError

    return MCPTool(
        fn=unused,
        name=local_name(prefix, remote.name),
        description=remote.description or remote.title or "",
        args_model=_AnyArguments,
        is_async=True,
        inline=True,  # the connection lives in this process: never shipped to a Ray task
        approval=approval,
        remote_name=remote.name,
        input_schema=schema,
        call=call,
    )


def result_value(result: CallToolResult, name: str) -> Any:
    """The model's view of a result: its text parts; the structured content (as JSON) when
    there is no text; a note for an image or audio part (tool results carry text only).
    An `isError` result raises ToolExecutionError with the server's text."""
    parts = [_part_text(part) for part in result.content]
    text = "\n".join(p for p in parts if p)
    if result.is_error:
        raise ToolExecutionError(text or f"tool {name!r} failed", tool=name)
    if not text and result.structured_content is not None:
        return result.structured_content
    return text


def _part_text(part: Any) -> str:
    kind = getattr(part, "type", "")
    if kind == "text":
        return str(part.text)
    if kind in ("image", "audio"):
        return f"[{kind} {part.mime_type}, {_size(part.data)} bytes: not shown]"
    if kind == "resource_link":
        return f"[resource {part.uri}]"
    if kind == "resource":
        inner = part.resource
        text = getattr(inner, "text", None)
        return str(text) if text is not None else f"[resource {inner.uri}: binary]"
    return f"[{kind or 'unknown'} content]"


def _size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return len(data)

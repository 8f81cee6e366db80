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
from mcp.types import CallToolResult, ImageContent
from pydantic import BaseModel, ConfigDict

from ..errors import ToolExecutionError
from ..messages import ImagePart
from ..models.contract import ToolSpec
from ..tools import Tool, ToolArgumentsError, ToolContext, ToolResult, tool_result_text

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


def result_value(result: CallToolResult, name: str) -> ToolResult:
    """A result as the model reads it: its text parts; its image parts as images (checked
    by the agent loop as any tool's are); a note for audio (no wire takes audio in a tool
    result) and binary resources. The structured content is the result's data (the
    call's report keeps it) and, when there is no text, its JSON is the text. An
    `isError` result raises ToolExecutionError with the server's text."""
    content: list[str | ImagePart] = []
    for part in result.content:
        if isinstance(part, ImageContent):
            content.append(ImagePart(data=part.data, media_type=part.mime_type))
        elif text := _part_text(part):
            # Text parts read as lines (an image between them or not).
            after_text = any(isinstance(c, str) for c in content)
            content.append(f"\n{text}" if after_text else text)
    text = "".join(c for c in content if isinstance(c, str))
    if result.is_error:
        raise ToolExecutionError(text or f"tool {name!r} failed", tool=name)
    structured = result.structured_content
    if not text and structured is not None:
        content.insert(0, tool_result_text(structured, name))
    return ToolResult(content=content, data=structured)


def _part_text(part: Any) -> str:
    kind = getattr(part, "type", "")
    if kind == "text":
        return str(part.text)
    if kind == "audio":
        return f"[audio {part.mime_type}, {_size(part.data)} bytes: not shown]"
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

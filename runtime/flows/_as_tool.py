"""Any executable as a tool: the model gives it an input; it runs as a nested run whose
report hangs under the tool call and whose usage adds to the caller's."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, create_model

from ..executable import executable_name
from ..seams.attempt import started_by
from ..tools import Tool, ToolContext

__all__ = ["executable_tool"]


class _TextInput(BaseModel):
    input: Annotated[str, Field(description="What to ask or tell it.")]


def executable_tool(
    executable: Any, *, name: str | None = None, description: str | None = None
) -> Tool[..., Any]:
    """A tool running `executable` with the caller's ids, deps and abort signal.

    Its arguments are the executable's declared input model (`input=` of a workflow or
    supervisor) when it has one, else one string, `{"input": "..."}`.
    """
    declared: type[BaseModel] | None = getattr(executable, "input_model", None)
    if not (isinstance(declared, type) and issubclass(declared, BaseModel)):
        declared = None
    args_model: type[BaseModel] = (
        _TextInput
        if declared is None
        else create_model(f"{executable_name(executable)}_args", __base__=declared)
    )

    async def run_nested(ctx: ToolContext, **arguments: Any) -> Any:
        value = arguments["input"] if declared is None else declared.model_validate(arguments)
        return await executable.execute(value, **started_by(ctx))

    kind = getattr(executable, "kind", "executable")
    tool_name = name or executable_name(executable)
    # Inline: the nested run is itself a loop of awaits that sends its own model calls
    # and tools where they belong; as a remote task it would hold a worker idle.
    return Tool(
        fn=run_nested,
        name=tool_name,
        description=description
        or getattr(executable, "description", None)
        or f"Run the {kind} {getattr(executable, 'name', tool_name)!r}.",
        args_model=args_model,
        is_async=True,
        ctx_param="ctx",
        inline=True,
    )

"""A run's toolsets, resolved into its tools and tool specs when it starts."""

from __future__ import annotations

from typing import Any

from ..abort import abortable
from ..errors import InvalidOptionsError
from ..tools import Tool
from ._state import RunState

__all__ = ["resolve_toolsets"]


async def resolve_toolsets(run: RunState) -> None:
    """Add the toolsets' tools (each toolset caches its list) to the run's tools and specs.

    Under the run's abort signal; a toolset that cannot list its tools fails the run.
    Once: a resume resolves them before checking drift, then runs the loop."""
    config = run.config
    if not config.toolsets:
        return
    tools: dict[str, Tool[..., Any]] = dict(config.tools)
    added: list[Tool[..., Any]] = []
    for toolset in config.toolsets:
        for found in await abortable(toolset.tools(), run.signal):
            if found.name in tools:
                raise InvalidOptionsError(f"two tools are named {found.name!r}")
            tools[found.name] = found
            added.append(found)
    compact = config.tool_schemas == "compact"
    specs = (*config.options.tools, *(t.spec(compact) for t in added))
    config.tools = tools
    config.options = config.options.model_copy(update={"tools": specs})
    config.toolsets = ()  # resolved: the tools are in `tools` now

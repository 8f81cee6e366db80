"""An agent as a tool of another: `Agent.as_tool`."""

from __future__ import annotations

import re
from typing import Annotated, Any, Protocol

from pydantic import Field

from ..abort import AbortSignal
from ..observers.report import AgentResult
from ..run_context import RunInfo
from ..seams.attempt import RunScope, started_by
from ..tools import Tool, ToolContext, tool

__all__ = ["agent_tool"]


class NestedAgent(Protocol):
    """What a nested run needs of the agent it runs."""

    @property
    def name(self) -> str: ...

    async def execute(
        self,
        input: str,
        *,
        parent: RunInfo | None,
        signal: AbortSignal | None,
        scope: RunScope | None,
    ) -> AgentResult: ...


def agent_tool(agent: NestedAgent, *, name: str | None, description: str | None) -> Tool[..., Any]:
    """A tool that runs `agent` with the parent's ids, session, deps, abort signal and
    scope (its job and the budgets it is held to).

    It returns the nested AgentResult; the tool round hangs the nested report under the
    call, adds its usage to the parent's, and sends the model its data or text.
    """

    async def run_nested(
        input: Annotated[str, Field(description="What to ask or tell the agent.")],
        ctx: ToolContext,
    ) -> AgentResult:
        return await agent.execute(input, **started_by(ctx))

    tool_name = name or re.sub(r"[^a-zA-Z0-9_-]", "_", agent.name)[:64]
    # Inline: the nested run is itself a loop of awaits (it sends its own tools and model
    # calls where they belong); as a remote task it would hold a worker and a CPU idle.
    make = tool(
        inline=True,
        name=tool_name,
        description=description or f"Ask the agent {agent.name!r}; it answers in text.",
    )
    return make(run_nested)

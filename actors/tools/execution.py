"""Tool execution on Ray: where each tool call runs.

- `inline=True`: in the caller's process, as on the local backend.
- A tool that declares `num_cpus`, `resources` or a `runtime_env` needs placement: each
  call is one Ray task asking for them (`tasks`), with `retries` for idempotent
  tools and `timeout` enforced by cancelling the task.
- Every other tool, called from a batch runner (`RayOptions.tools_in_runners`, the
  default): in the runner's process, as in-process. A runner is already a worker of
  its own; another hop would cost a Ray call per tool call and buy little.
- Every other tool, called from anywhere else (a driver, a notebook): the tool
  executors of the caller's node (`executor_pool`), a small pool of long-lived actors
  that runs many calls at once, the calls of one trip in one remote call per executor.

Arguments are validated in the caller (an invalid call costs no remote call). The run's
signal stays in the caller's process: a remote tool's `ToolContext` carries a signal of
its task's or executor's own, fired when its call is cancelled or times out, just before
the tool is interrupted.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from raygent.backend import Tool, ToolContext

from .._options import RayOptions
from .._ray import in_batch_runner
from .executor_pool import ToolExecutors
from .tasks import ToolTasks, needs_placement

__all__ = ["RayToolExecution"]


class RayToolExecution:
    """`ToolExecution` on Ray: inline, on this node's tool executors, or as a task."""

    def __init__(self, options: RayOptions | None = None) -> None:
        self.options = options or RayOptions()
        self._tasks = ToolTasks(self.options)
        self._executors = ToolExecutors(self.options)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.options,))

    async def invoke(
        self, tool: Tool[..., Any], arguments: dict[str, Any] | None, ctx: ToolContext
    ) -> Any:
        hosted = self.options.tools_in_runners and in_batch_runner.get()
        if tool.inline or (hosted and not needs_placement(tool)):
            return await tool.invoke(arguments, ctx)
        kwargs = tool.validate(arguments)
        self.options.connect()
        # The signal stays here; the task or executor gives the tool one of its own.
        remote_ctx = dataclasses.replace(ctx, signal=None) if tool.ctx_param else None
        where = self._tasks if needs_placement(tool) else self._executors
        return await where.invoke(tool, kwargs, remote_ctx, ctx)

    async def executor_stats(self) -> list[dict[str, Any]]:
        """The `stats()` of this node's tool executors: pid, batches and calls run,
        largest batch, calls running, threads, tools known, retiring."""
        return await self._executors.stats()

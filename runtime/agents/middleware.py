"""Middleware: hooks around a run, each model trip, and each tool call.

Subclass `Middleware` and override what you need. A `before_*` hook that returns
anything but None short-circuits that step with the value: `before_execute` with the
run's output, `before_trip` with a `ModelResponse`, `before_tool` with the tool's
result. `after_*` hooks may replace the value they get. `on_*_error` hooks observe
errors (they cannot swallow them). `before` hooks run in order, `after` in reverse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..messages import Message, ToolCall
    from ..models.contract import ModelOptions, ModelResponse
    from ..observers.report import AgentResult
    from ..run_context import RunInfo

__all__ = ["Middleware"]


class Middleware:
    """No-op hooks; override the ones you need (sync or async are both fine)."""

    async def before_execute(self, run: RunInfo, input: list[Message]) -> Any:
        return None

    async def after_execute(self, run: RunInfo, result: AgentResult) -> AgentResult:
        return result

    async def on_execute_error(self, run: RunInfo, error: BaseException) -> None:
        return None

    async def before_trip(
        self, run: RunInfo, messages: list[Message], options: ModelOptions
    ) -> ModelResponse | None:
        return None

    async def after_trip(self, run: RunInfo, response: ModelResponse) -> ModelResponse:
        return response

    async def on_trip_error(self, run: RunInfo, error: BaseException) -> None:
        return None

    async def before_tool(self, run: RunInfo, call: ToolCall) -> Any:
        return None

    async def after_tool(self, run: RunInfo, call: ToolCall, output: Any) -> Any:
        return output

    async def on_tool_error(self, run: RunInfo, call: ToolCall, error: BaseException) -> None:
        return None

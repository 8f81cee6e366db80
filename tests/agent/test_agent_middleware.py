"""Middleware around the run, each trip and each tool: before / after / on_error."""

from __future__ import annotations

from typing import Any

from agent_support import add, explode

import raygent
from raygent import Middleware, ModelOptions, ModelResponse, ToolCall, ToolMessage
from raygent.errors import ServerError
from raygent.messages import Message
from raygent.observers.report import AgentResult
from raygent.run_context import RunInfo
from raygent.testing import ScriptedModel, call, reply
from raygent.usage import Usage


class Log(Middleware):
    """Records every hook it sees, tagged with its name."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    async def before_execute(self, run: RunInfo, input: list[Message]) -> Any:
        self.log.append(f"{self.name}.before_execute:{input[-1].text}")
        return None

    async def after_execute(self, run: RunInfo, result: AgentResult) -> AgentResult:
        self.log.append(f"{self.name}.after_execute")
        return result

    async def on_execute_error(self, run: RunInfo, error: BaseException) -> None:
        self.log.append(f"{self.name}.on_execute_error:{type(error).__name__}")

    async def before_trip(
        self, run: RunInfo, messages: list[Message], options: ModelOptions
    ) -> ModelResponse | None:
        self.log.append(f"{self.name}.before_trip")
        return None

    def after_trip(self, run: RunInfo, response: ModelResponse) -> ModelResponse:
        self.log.append(f"{self.name}.after_trip")
        return response

    async def on_trip_error(self, run: RunInfo, error: BaseException) -> None:
        self.log.append(f"{self.name}.on_trip_error:{type(error).__name__}")

    async def before_tool(self, run: RunInfo, call: ToolCall) -> Any:
        self.log.append(f"{self.name}.before_tool:{call.name}")
        return None

    async def after_tool(self, run: RunInfo, call: ToolCall, output: Any) -> Any:
        self.log.append(f"{self.name}.after_tool:{output}")
        return output

    async def on_tool_error(self, run: RunInfo, call: ToolCall, error: BaseException) -> None:
        self.log.append(f"{self.name}.on_tool_error:{type(error).__name__}")


async def test_hooks_run_in_order_before_forward_after_backward() -> None:
    log: list[str] = []
    model = ScriptedModel([reply(tool_calls=[call("add", {"a": 1, "b": 2})]), "3"])
    bot = raygent.agent(model=model, tools=[add], middleware=[Log("A", log), Log("B", log)])
    result = await bot.execute("sum")
    assert result.ok
    assert log == [
        "A.before_execute:sum",
        "B.before_execute:sum",
        "A.before_trip",
        "B.before_trip",
        "B.after_trip",
        "A.after_trip",
        "A.before_tool:add",
        "B.before_tool:add",
        "B.after_tool:3",
        "A.after_tool:3",
        "A.before_trip",
        "B.before_trip",
        "B.after_trip",
        "A.after_trip",
        "B.after_execute",
        "A.after_execute",
    ]


async def test_before_execute_may_short_circuit_the_run() -> None:
    class Cached(Middleware):
        async def before_execute(self, run: RunInfo, input: list[Message]) -> Any:
            return "from cache"

    model = ScriptedModel([])
    result = await raygent.agent(model=model, middleware=[Cached()]).execute("hi")
    assert result.ok and result.text == "from cache" and result.data is None
    assert model.requests == [] and result.report.trips == []

    class Structured(Middleware):
        def before_execute(self, run: RunInfo, input: list[Message]) -> Any:
            return {"cached": True}

    result = await raygent.agent(model=model, middleware=[Structured()]).execute("hi")
    assert result.data == {"cached": True}


async def test_before_trip_may_answer_instead_of_the_model_and_after_trip_may_rewrite() -> None:
    class Canned(Middleware):
        async def before_trip(
            self, run: RunInfo, messages: list[Message], options: ModelOptions
        ) -> ModelResponse | None:
            if messages[-1].text == "canned?":
                return ModelResponse(
                    content=[raygent.TextPart(text="canned answer")],
                    finish_reason="stop",
                    usage=Usage(),
                    provider="mw",
                )
            return None

        async def after_trip(self, run: RunInfo, response: ModelResponse) -> ModelResponse:
            return response.model_copy(
                update={"content": [raygent.TextPart(text=response.text.upper())]}
            )

    model = ScriptedModel(["real answer"])
    bot = raygent.agent(model=model, middleware=[Canned()])
    assert (await bot.execute("canned?")).text == "CANNED ANSWER"
    assert model.requests == []
    result = await bot.execute("real?")
    assert result.text == "REAL ANSWER"
    assert result.report.trips[0].output == "REAL ANSWER"


async def test_tool_hooks_may_short_circuit_and_rewrite() -> None:
    class Guard(Middleware):
        async def before_tool(self, run: RunInfo, call: ToolCall) -> Any:
            return "blocked by policy" if call.name == "explode" else None

        async def after_tool(self, run: RunInfo, call: ToolCall, output: Any) -> Any:
            return f"[{output}]"

    model = ScriptedModel(
        [
            reply(tool_calls=[call("explode", {"reason": "x"}), call("add", {"a": 1, "b": 1})]),
            "done",
        ]
    )
    bot = raygent.agent(model=model, tools=[add, explode], middleware=[Guard()])
    result = await bot.execute("go")
    assert result.ok
    sent, _ = model.requests[1]
    outputs = [m.text for m in sent if isinstance(m, ToolMessage)]
    assert outputs == ["blocked by policy", "[2]"]


async def test_error_hooks_see_typed_errors() -> None:
    log: list[str] = []
    model = ScriptedModel(
        [reply(tool_calls=[call("explode", {"reason": "x"})]), ServerError("down", provider="t")]
    )
    bot = raygent.agent(model=model, tools=[explode], middleware=[Log("M", log)])
    result = await bot.execute("go")
    assert isinstance(result.error, ServerError)
    assert "M.on_tool_error:RuntimeError" in log
    assert "M.on_trip_error:ServerError" in log
    assert log[-1] == "M.on_execute_error:ServerError"


async def test_a_failing_error_hook_does_not_mask_the_run_s_error() -> None:
    class Broken(Middleware):
        async def on_execute_error(self, run: RunInfo, error: BaseException) -> None:
            raise RuntimeError("hook broke")

    model = ScriptedModel([ServerError("down", provider="t")])
    result = await raygent.agent(model=model, middleware=[Broken()]).execute("go")
    assert isinstance(result.error, ServerError)


async def test_middleware_sees_the_run_identity() -> None:
    seen: list[RunInfo] = []

    class Spy(Middleware):
        async def before_execute(self, run: RunInfo, input: list[Message]) -> Any:
            seen.append(run)
            return None

    bot = raygent.agent("spied", model=ScriptedModel(["ok"]), middleware=[Spy()])
    result = await bot.execute("go", session_id="s-7")
    [info] = seen
    assert (info.run_id, info.session_id, info.agent_name) == (
        result.report.run_id,
        "s-7",
        "spied",
    )

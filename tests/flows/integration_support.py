"""A small flow for the integration tests (views, traces, tools, batch, eval): `Pipeline`
runs its stages in order through the shared `Flow` base and `FlowRun`, exactly as
workflows and supervisors do, so these tests do not wait on either.

A stage is `(name, executable)` (one run, given the previous stage's output) or
`(name, {branch: executable, ...})` (the branches at once, each given the same input;
the stage's output is a dict by branch). A stage whose run fails fails the pipeline with
`StepFailedError`, the outputs so far kept, once its `retries` are spent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

import raygent
from raygent import AnthropicModel, OpenAIModel, Pricing
from raygent.errors import StepFailedError
from raygent.flows import Flow, FlowResult
from raygent.flows._run import FlowRun
from raygent.models._http import HTTPModel
from raygent.observers._registry import Observe
from raygent.observers.report import StepReport
from raygent.sim import Fault, Match, Reply, Rule, Simulator, ToolCallReply

Stage = tuple[str, Any]


class Pipeline(Flow):
    """A workflow of stages (see the module's docstring). `prepare` turns the flow's
    input into the first stage's (a lambda, say: it must ship to Ray runners too)."""

    kind = "workflow"

    def __init__(
        self,
        name: str,
        stages: Sequence[Stage],
        *,
        prepare: Callable[[Any], Any] | None = None,
        input_model: type[BaseModel] | None = None,
        description: str | None = None,
        observe: Observe = None,
        retries: int = 0,
    ) -> None:
        super().__init__(
            name=name,
            version="1",
            input_model=input_model,
            output_model=None,
            description=description,
            on=None,
            observe=observe,
        )
        self.stages = list(stages)
        self.prepare = prepare
        self.retries = retries

    async def _body(self, run: FlowRun, input: Any) -> FlowResult:
        value = self.prepare(input) if self.prepare is not None else input
        outputs: dict[str, Any] = {}
        for name, what in self.stages:
            run.check_abort()
            parallel = isinstance(what, Mapping)
            step = await run.open_step(name, "parallel" if parallel else "agent")
            for _ in range(1 + self.retries):  # a stage's runs again, every attempt kept
                await run.attempt(step)
                if parallel:
                    branches = list(what.items())
                    results = await asyncio.gather(
                        *(run.child(exe, value, step, branch=branch) for branch, exe in branches)
                    )
                    named = list(zip((branch for branch, _ in branches), results, strict=True))
                else:
                    named = [(None, await run.child(what, value, step))]
                failed = next(((b, r) for b, r in named if not r.ok), None)
                if failed is None:
                    break
            if failed is not None:
                branch, result = failed
                return await self._failed(run, step, branch, result.error, outputs)
            if parallel:
                output: Any = {branch: _output(result) for branch, result in named}
                value = "\n".join(f"{branch}: {text}" for branch, text in output.items())
            else:
                output = value = _output(named[0][1])
            outputs[name] = output
            await run.close_step(step, "completed")
        last = outputs[self.stages[-1][0]] if self.stages else value
        text = last if isinstance(last, str) else value
        return await run.finish(data=last, text=text, outputs=outputs, error=None)

    async def _failed(
        self,
        run: FlowRun,
        step: StepReport,
        branch: str | None,
        cause: Any,
        outputs: dict[str, Any],
    ) -> FlowResult:
        await run.close_step(step, "failed", cause)
        error = StepFailedError(
            f"step {step.name!r} failed: {getattr(cause, 'message', cause)}",
            step=step.name,
            attempts=step.attempts,
            branch=branch,
            cause=cause.to_dict() if hasattr(cause, "to_dict") else None,
        )
        return await run.finish(data=None, text="", outputs=outputs, error=error)


def _output(result: Any) -> Any:
    return result.data if result.data is not None else result.text


# -- a scenario on the simulator -----------------------------------------------------------

KEY = "sk-flows-test-000000"
PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=2.0)
OWLS = "Owls hunt at night."


@raygent.tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


def script(tool: str = "digest", arguments: dict[str, Any] | None = None) -> list[Rule]:
    """Researchers (system prompt "research...") call `lookup`, then answer OWLS; an
    editor ("edit...") calls `tool` with `arguments`, then answers with what it got; a
    broken agent ("broken"), or any request whose last user message says "doomed", gets
    a 400, and so does a flaky agent's ("flaky") first request; anything else is the
    simulator's echo."""
    refused = Reply(fault=Fault(kind="status", status=400))
    return [
        Rule(match=Match(system="broken"), reply=refused),
        Rule(match=Match(system="flaky"), reply=refused, times=1),
        Rule(match=Match(last_user="doomed"), reply=refused),
        Rule(
            match=Match(system="research", after_tool_result=False),
            reply=Reply(tool_calls=[ToolCallReply("lookup", {"topic": "owls"})]),
        ),
        Rule(match=Match(system="research", after_tool_result=True), reply=Reply(text=OWLS)),
        Rule(
            match=Match(system="edit", after_tool_result=False),
            reply=Reply(tool_calls=[ToolCallReply(tool, arguments or {"input": "owls"})]),
        ),
        Rule(match=Match(system="edit", after_tool_result=True), reply=Reply(text="Edited.")),
    ]


def sim_model(sim: Simulator, provider: str = "openai", **kwargs: Any) -> HTTPModel:
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("pricing", PRICING)
    if provider == "anthropic":
        return AnthropicModel("sim-claude", base_url=sim.anthropic_base_url, **kwargs)
    return OpenAIModel("sim-gpt", base_url=sim.openai_base_url, **kwargs)


def researcher(model: HTTPModel, name: str = "researcher") -> raygent.Agent:
    return raygent.agent(name, model=model, system_prompt="research owls", tools=[lookup])


def writer(model: HTTPModel, name: str = "writer") -> raygent.Agent:
    return raygent.agent(name, model=model, system_prompt="write it up")


def broken(model: HTTPModel, name: str = "broken") -> raygent.Agent:
    return raygent.agent(name, model=model, system_prompt="broken")


def flaky(model: HTTPModel, name: str = "flaky") -> raygent.Agent:
    return raygent.agent(name, model=model, system_prompt="flaky")


def editor(model: HTTPModel, tool: Any, name: str = "editor") -> raygent.Agent:
    return raygent.agent(name, model=model, system_prompt="edit", tools=[tool])


def digest(model: HTTPModel, name: str = "digest", **options: Any) -> raygent.Workflow:
    """A real workflow: two researchers at once (branches a and b: 2 trips and a tool
    call each), then a writer (one trip) given their notes: three runs, two steps."""
    return raygent.workflow(
        name=name,
        description="Research a topic and write it up.",
        steps=[
            raygent.step(
                "research",
                parallel={b: researcher(model, f"researcher-{b}") for b in ("a", "b")},
            ),
            raygent.step(
                "write",
                agent=writer(model),
                input=lambda s: "\n".join(f"{b}: {t}" for b, t in s.last.items()),
            ),
        ],
        **options,
    )

"""The factory and a plain run: names, prompts, options, the result and its report."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from agent_support import City, add, calc, search

import raygent
from raygent import Capabilities, Pricing, SystemMessage, SystemPrompt, UserMessage
from raygent.errors import (
    PromptError,
    RaygentError,
)
from raygent.messages import Message
from raygent.models.contract import ModelOptions
from raygent.testing import FunctionModel, ScriptedModel, call, reply

PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=2.0)


async def test_a_run_returns_the_answer_and_a_full_report() -> None:
    model = ScriptedModel(["Paris."], name="m1", provider="acme", pricing=PRICING)
    bot = raygent.agent("geo", model=model, version="v3", system_prompt="Be brief.")
    result = await bot.execute("Capital of France?")
    assert result.ok and result.error is None and result.data is None
    assert result.text == "Paris."
    report = result.report
    assert report.status == "completed"
    assert report.run_id and report.root_run_id == report.run_id
    assert report.parent_run_id is None and report.session_id is None
    assert (report.name, report.version) == ("geo", "v3")
    assert report.model.name == "m1" and report.model.provider == "acme"
    assert report.ended_at is not None and report.ended_at >= report.started_at
    assert report.duration is not None and report.duration >= 0
    assert report.system_prompt == "Be brief."
    assert report.messages is None  # not captured unless asked
    [trip] = report.trips
    assert (trip.index, trip.finish_reason, trip.output, trip.purpose) == (
        0,
        "stop",
        "Paris.",
        "answer",
    )
    assert trip.usage == result.usage and trip.usage.requests == 1
    assert trip.timing.duration is not None and trip.timing.ended_at is not None
    assert result.usage.cost is not None and result.usage.cost.total > 0
    sent, _ = model.requests[0]
    assert sent == [SystemMessage(content="Be brief."), UserMessage(content="Capital of France?")]


def test_anonymous_agents_are_named_from_provider_model_and_tools() -> None:
    model = ScriptedModel([], name="gpt-4o-mini", provider="openai")
    assert raygent.agent(model=model, tools=[search, calc]).name == (
        "anon_openai_gpt-4o-mini_search+calc"
    )
    assert raygent.agent(model=model).name == "anon_openai_gpt-4o-mini"
    assert raygent.agent("named", model=model, tools=[search]).name == "named"


def test_anonymous_names_are_stable_across_processes() -> None:
    code = (
        "import raygent\n"
        "from raygent.testing import ScriptedModel\n"
        "@raygent.tool\n"
        "def search(q: str) -> str:\n"
        "    return q\n"
        "@raygent.tool\n"
        "def calc(e: str) -> str:\n"
        "    return e\n"
        "m = ScriptedModel([], name='gpt-4o-mini', provider='openai')\n"
        "print(raygent.agent(model=m, tools=[search, calc]).name)\n"
    )
    # Another process has another hash seed: a name built from a set would differ.
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout.strip()
    here = raygent.agent(
        model=ScriptedModel([], name="gpt-4o-mini", provider="openai"), tools=[search, calc]
    ).name
    assert other == here == "anon_openai_gpt-4o-mini_search+calc"


async def test_placeholders_come_from_the_factory_and_are_overridden_per_call() -> None:
    model = FunctionModel(lambda messages, options: messages[0].text)
    bot = raygent.agent(
        model=model,
        system_prompt="You are {{ role }} speaking {{lang}}.",
        placeholders={"role": "a guide", "lang": "French"},
    )
    assert (await bot.execute("hi")).text == "You are a guide speaking French."
    result = await bot.execute("hi", placeholders={"lang": "Dutch"})
    assert result.text == "You are a guide speaking Dutch."
    assert result.report.system_prompt == "You are a guide speaking Dutch."
    # The factory's defaults are untouched by a call's values.
    assert (await bot.execute("hi")).text == "You are a guide speaking French."


async def test_a_missing_placeholder_fails_the_run_without_raising() -> None:
    model = ScriptedModel([])
    bot = raygent.agent(model=model, system_prompt="Hello {{name}}.")
    result = await bot.execute("hi")
    assert result.report.status == "failed"
    assert isinstance(result.error, PromptError)
    assert "{{name}}" in result.error.message
    assert model.requests == []


async def test_a_prompt_object_from_a_file_is_read_once(tmp_path: Path) -> None:
    path = tmp_path / "prompt.md"
    path.write_text("Answer as {{persona}}.", encoding="utf-8")
    prompt = SystemPrompt.from_file(path)
    path.write_text("changed on disk", encoding="utf-8")
    model = FunctionModel(lambda messages, options: messages[0].text)
    bot = raygent.agent(model=model, system_prompt=prompt, placeholders={"persona": "a pirate"})
    assert (await bot.execute("hi")).text == "Answer as a pirate."
    # A per-call prompt (string or object) replaces the agent's.
    assert (await bot.execute("hi", system_prompt="Plain {{persona}}.")).text == "Plain a pirate."
    other = SystemPrompt("Other.")
    assert (await bot.execute("hi", system_prompt=other)).text == "Other."


async def test_model_options_merge_shallowly_over_the_agent_s() -> None:
    model = ScriptedModel(["a", "b"])
    bot = raygent.agent(
        model=model,
        tools=[add],
        model_options={
            "temperature": 0.2,
            "max_tokens": 100,
            "provider_options": {"openai": {"seed": 1, "user": "x"}},
        },
    )
    await bot.execute("one")
    await bot.execute(
        "two",
        model_options={
            "max_tokens": 50,
            "provider_options": {"openai": {"seed": 2}},
            "tools": (),
            "response_schema": {"type": "object"},
            "signal": "ignored",
        },
    )
    first, second = (options for _, options in model.requests)
    assert (first.temperature, first.max_tokens) == (0.2, 100)
    assert first.provider_options == {"openai": {"seed": 1, "user": "x"}}
    assert (second.temperature, second.max_tokens) == (0.2, 50)
    # A nested dict replaces the whole key.
    assert second.provider_options == {"openai": {"seed": 2}}
    # tools / signal / response_schema given there are ignored.
    assert [t.name for t in second.tools] == ["add"]
    assert second.response_schema is None


async def test_invalid_model_options_fail_the_run_without_raising() -> None:
    model = ScriptedModel([])
    result = await raygent.agent(model=model).execute("hi", model_options={"temprature": 1})
    assert result.report.status == "failed"
    assert isinstance(result.error, RaygentError)
    assert "temprature" in result.error.message
    assert model.requests == []


async def test_input_may_be_text_a_message_a_list_of_messages_or_of_parts() -> None:
    model = FunctionModel(lambda messages, options: f"{len(messages)}:{messages[-1].text}")
    bot = raygent.agent(model=model)
    assert (await bot.execute("plain")).text == "1:plain"
    assert (await bot.execute(UserMessage(content="msg"))).text == "1:msg"
    two = [UserMessage(content="a"), UserMessage(content="b")]
    assert (await bot.execute(two)).text == "2:b"
    parts = [raygent.TextPart(text="x"), raygent.TextPart(text="y")]
    assert (await bot.execute(parts)).text == "1:xy"


async def test_history_goes_between_the_system_prompt_and_the_input() -> None:
    model = ScriptedModel(["ok"])
    history: list[Message] = [
        UserMessage(content="earlier"),
        raygent.AssistantMessage(content="answer"),
    ]
    result = await raygent.agent(model=model, system_prompt="S").execute("now", history=history)
    assert result.ok
    sent, _ = model.requests[0]
    assert [m.role for m in sent] == ["system", "user", "assistant", "user"]
    assert [m.text for m in sent] == ["S", "earlier", "answer", "now"]


async def test_messages_are_captured_only_when_asked() -> None:
    bot = raygent.agent(model=ScriptedModel(["a", "b", "c"]), capture_messages=True)
    captured = (await bot.execute("hi")).report.messages
    assert captured is not None
    assert [m.role for m in captured] == ["user", "assistant"]
    assert (await bot.execute("hi", capture_messages=False)).report.messages is None
    plain = raygent.agent(model=ScriptedModel(["x"]))
    assert (await plain.execute("hi", capture_messages=True)).report.messages is not None


async def test_one_agent_serves_many_concurrent_runs() -> None:
    async def echo(messages: list[Message], options: ModelOptions) -> Any:
        await asyncio.sleep(0)  # let the runs interleave
        text = messages[-1].text
        if text.startswith("n"):
            return reply(tool_calls=[call("add", {"a": int(text[1:]), "b": 1})])
        return f"result {text}"

    bot = raygent.agent(model=FunctionModel(echo), tools=[add])
    results = await asyncio.gather(*(bot.execute(f"n{i}", session_id=f"s{i}") for i in range(40)))
    assert [r.text for r in results] == [f"result {i + 1}" for i in range(40)]
    assert len({r.report.run_id for r in results}) == 40
    for i, result in enumerate(results):
        assert result.report.session_id == f"s{i}"
        assert [c.input for c in result.report.tool_calls] == [{"a": i, "b": 1}]


async def test_session_id_is_stamped_on_every_report_node() -> None:
    model = ScriptedModel([reply(tool_calls=[call("add", {"a": 1, "b": 2})]), "3"])
    result = await raygent.agent(model=model, tools=[add]).execute("1+2", session_id="sess-1")
    report = result.report
    assert report.session_id == "sess-1"
    assert [t.session_id for t in report.trips] == ["sess-1", "sess-1"]
    assert [c.session_id for c in report.tool_calls] == ["sess-1"]


def test_execute_sync_runs_from_a_script() -> None:
    bot = raygent.agent(model=ScriptedModel(["sync ok"]))
    result = bot.execute_sync("hi")
    assert result.ok and result.text == "sync ok"


async def test_execute_never_raises_whatever_the_model_does() -> None:
    class Weird(Exception):
        pass

    for step in [Weird("odd"), KeyError("k"), ValueError]:
        result = await raygent.agent(model=ScriptedModel([step])).execute("hi")
        assert result.report.status == "failed"
        assert isinstance(result.error, RaygentError)
    # Past the end of its script, the model raises: still a typed failure.
    result = await raygent.agent(model=ScriptedModel([])).execute("hi")
    assert result.report.status == "failed" and "script" in result.error.message  # type: ignore[union-attr]


async def test_bad_input_fails_the_run_without_raising() -> None:
    result = await raygent.agent(model=ScriptedModel([])).execute(None)  # type: ignore[arg-type]
    assert result.report.status == "failed"
    assert isinstance(result.error, RaygentError)


async def test_capabilities_a_model_lacks_are_not_sent() -> None:
    plain = Capabilities(structured_output=False)
    model = ScriptedModel(['{"name": "Oslo", "population": 700000}'], capabilities=plain)
    result = await raygent.agent(model=model, output=City).execute("Oslo?")
    assert result.data == City(name="Oslo", population=700000)
    _, options = model.requests[0]
    assert options.response_schema is None


async def test_an_agent_keeps_nothing_a_call_brought() -> None:
    import gc
    import weakref

    from pydantic import create_model

    bot = raygent.agent(model=FunctionModel(lambda messages, options: '{"x": 1}'), output=City)
    refs = []
    for i in range(3):
        per_call = create_model(f"PerCall{i}", x=(int, ...))
        assert (await bot.execute("go", output=per_call)).data == per_call(x=1)
        refs.append(weakref.ref(per_call))
        del per_call
    gc.collect()
    assert [r() for r in refs] == [None, None, None]

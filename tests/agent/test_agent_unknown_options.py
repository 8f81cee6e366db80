"""Unknown options are refused everywhere, before anything is sent (issue #44, point 1),
on both backends: a misspelt run option fails the run unsent (execute never raises), an
agent's misspelt model option is refused when the agent is built, and a batch or an
estimate with a misspelt option raises in the driver before any runner starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agent_support import KEY
from pydantic import BaseModel

import raygent
from raygent.errors import InvalidOptionsError, UnknownOptionError
from raygent.sim import Reply, Rule, Simulator, serve
from raygent.stores import SQLiteStore

SCRIPT = [Rule(reply=Reply(json={"answer": 42}))]


class Answer(BaseModel):
    answer: int


def _model(sim: Simulator) -> raygent.OpenAIModel:
    return raygent.OpenAIModel("gpt-4o-mini", base_url=sim.openai_base_url, api_key=KEY)


async def _streamed(bot: Any, **options: Any) -> Any:
    stream = bot.stream("q", **options)
    async for _ in stream:
        pass
    return await stream.result


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"outptu": Answer}, "unknown run option 'outptu' (did you mean 'output'?)"),
        ({"system_promt": "Be brief."}, "(did you mean 'system_prompt'?)"),
        ({"temperature": 0.2}, "temperature is a model option: pass model_options="),
        ({"tools": []}, "tools is the agent's: raygent.agent(..., tools=...)"),
        ({"model_options": {"max_tokenz": 9}}, "(did you mean 'max_tokens'?)"),
    ],
    ids=["output", "system_prompt", "model-option", "agent-setting", "model_options"],
)
async def test_every_entry_point_fails_a_misspelt_option_unsent(
    tmp_path: Path, given: dict[str, Any], said: str
) -> None:
    memory = raygent.Memory(store=SQLiteStore(tmp_path / "s.db"))
    async with serve(SCRIPT) as sim:
        bot = raygent.agent("bot", model=_model(sim), memory=memory)
        session = bot.session("ada")
        results = [
            await bot.execute("q", **given),
            bot.execute_sync("q", **given),
            await _streamed(bot, **given),
            await session.execute("q", **given),
        ]
        requests = sim.stats().requests
    assert requests == 0
    for result in results:
        assert result.status == "failed"
        assert isinstance(result.error, UnknownOptionError), result.error
        assert result.error.code == "UNKNOWN_OPTION"
        assert said in str(result.error)
    assert await session.history() == []  # nothing stored of a run that never ran


async def test_a_resume_with_a_misspelt_option_fails_unsent(tmp_path: Path) -> None:
    durable = raygent.Durable(store=SQLiteStore(tmp_path / "runs.db"))
    async with serve(SCRIPT) as sim:
        bot = raygent.agent(model=_model(sim), durable=durable)
        done = await bot.execute("q", output=Answer)
        paid = sim.stats().requests
        again = await bot.resume(done.run_id, outptu=Answer)  # type: ignore[call-arg]
        assert sim.stats().requests == paid
    assert done.ok and again.status == "failed"
    assert isinstance(again.error, UnknownOptionError) and again.error.suggestion == "output"


async def test_a_well_spelt_call_still_runs() -> None:
    async with serve(SCRIPT) as sim:
        bot = raygent.agent(model=_model(sim), model_options={"max_tokens": 64})
        result = await bot.execute("q", output=Answer, model_options={"temperature": 0.1})
    assert result.ok and result.data == Answer(answer=42)


def test_an_agent_s_model_options_are_checked_when_it_is_built() -> None:
    model = raygent.OpenAIModel("gpt-4o-mini", api_key=KEY)
    with pytest.raises(UnknownOptionError, match="did you mean 'max_tokens'") as caught:
        raygent.agent(model=model, model_options={"max_tokenz": 100})
    assert isinstance(caught.value, TypeError)
    with pytest.raises(UnknownOptionError, match="did you mean 'reasoning'"):
        raygent.agent(model=model, model_options={"reasoning_effort": "low"})
    # A value of the wrong kind, too: nothing is left to fail on every run.
    with pytest.raises(InvalidOptionsError, match=r"temperature: .*'hot'"):
        raygent.agent(model=model, model_options={"temperature": "hot"})
    # What the reference ignores there stays accepted (the run's own).
    raygent.agent(model=model, model_options={"tools": (), "signal": None, "max_tokens": 5})


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (
            {"run_options": {"outptu": Answer}},
            "raygent.batch(run_options=...): unknown run option 'outptu' (did you mean 'output'?)",
        ),
        ({"run_options": {"system_promt": "x"}}, "(did you mean 'system_prompt'?)"),
        (
            {"run_options": {"model_options": {"max_tokenz": 5}}},
            "unknown model option 'max_tokenz' (did you mean 'max_tokens'?)",
        ),
        (
            {"concurency": 4},
            "raygent.batch(): unknown option 'concurency' (did you mean 'concurrency'?)",
        ),
        ({"output": Answer}, "output is a run option: pass run_options={'output': ...}"),
        ({"temperature": 0.3}, "pass run_options={'model_options': {'temperature': ...}}"),
    ],
    ids=[
        "run-option",
        "system_prompt",
        "model-option",
        "batch-option",
        "run-as-batch",
        "model-as-batch",
    ],
)
async def test_a_batch_refuses_a_misspelt_option_in_the_driver_before_any_runner(
    backend_kind: str, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any], said: str
) -> None:
    from raygent.seams.registry import current_backend

    pools: list[Any] = []
    batches = current_backend().batches
    if batches is not None:  # Ray: no runner pool may be asked for
        monkeypatch.setattr(type(batches), "pool", lambda *a, **k: pools.append(a))
    async with serve(SCRIPT) as sim:
        bot = raygent.agent(model=_model(sim))
        with pytest.raises(UnknownOptionError) as caught:
            await raygent.batch(bot, ["a", "b"], progress=False, **options)
        with pytest.raises(UnknownOptionError):
            await raygent.estimate(bot, ["a", "b"], **options)
        requests = sim.stats().requests
    assert said in str(caught.value)
    assert isinstance(caught.value, TypeError)
    assert requests == 0 and pools == []


async def test_a_flow_names_the_run_options_it_takes(backend_kind: str) -> None:
    async with serve(SCRIPT) as sim:
        step = raygent.agent(model=_model(sim))
        flow = raygent.workflow(name="flow", steps=[raygent.step("ask", agent=step)])
        with pytest.raises(UnknownOptionError, match="did you mean 'context'"):
            await raygent.batch(flow, ["a"], progress=False, run_options={"contxt": {}})
        assert sim.stats().requests == 0


async def test_a_plain_callable_takes_no_run_options(backend_kind: str) -> None:
    async def upper(item: str) -> str:
        return item.upper()

    with pytest.raises(TypeError, match="a plain callable gets each item as it is"):
        await raygent.batch(upper, ["a"], progress=False, run_options={"output": Answer})


async def test_a_flow_run_with_a_misspelt_option_fails_before_any_step() -> None:
    async with serve(SCRIPT) as sim:
        step = raygent.agent(model=_model(sim))
        flow = raygent.workflow(name="flow", steps=[raygent.step("ask", agent=step)])
        result = await flow.execute("q", contxt={"user": "ada"})
        ok = await flow.execute("q", context={"user": "ada"})
        assert sim.stats().requests == 1  # the well-spelt run's one trip
    assert result.status == "failed" and isinstance(result.error, UnknownOptionError)
    assert "a run of workflow 'flow': unknown run option 'contxt'" in str(result.error)
    assert result.error.suggestion == "context" and ok.ok


async def test_a_flow_batch_s_items_may_still_name_a_session(backend_kind: str) -> None:
    # An item's session goes only to an executable that takes one: a flow runs its item
    # as before, not refused for a run option it was never given.
    async with serve(SCRIPT) as sim:
        step = raygent.agent(model=_model(sim))
        flow = raygent.workflow(name="flow", steps=[raygent.step("ask", agent=step)])
        items = [{"input": "q", "session_id": "ada", "user_id": "u1"}]
        result = await raygent.batch(flow, items, progress=False)
    assert result.ok, result.report.errors

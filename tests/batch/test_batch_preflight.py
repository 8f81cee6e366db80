"""A job checks itself before its first paid request (issue 44.2): a capability its model
lacks, an option value, a schema or a tier the provider would refuse, an unreachable
store or an unwritable sink refuse the job with one `JobCheckError` listing every
problem, on both backends, in `estimate` and in the CLI; nothing is sent (the
simulator's stats) and nothing is written to the sink (not even its job file)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backend_support import BACKENDS, on_backend
from batch_support import cli_on_sim, sim_agent_module
from pydantic import BaseModel

import raygent
from raygent import Memory
from raygent.errors import JobCheckError
from raygent.models import AnthropicModel, Capabilities, OpenAIModel
from raygent.sim import Simulator, serve
from raygent.stores import RedisStore, SQLiteStore
from raygent.testing import FunctionModel

# Nothing listens here: a store that cannot be reached.
DEAD_REDIS = "redis://127.0.0.1:1/0"


@pytest.fixture(params=BACKENDS)
def backend_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from on_backend(request)


class Answer(BaseModel):
    text: str
    score: int | None = None


def openai(sim: Simulator, name: str = "gpt-4o", **settings: Any) -> OpenAIModel:
    return OpenAIModel(name, base_url=sim.openai_base_url, api_key="sk-test", **settings)


def anthropic(sim: Simulator, **settings: Any) -> AnthropicModel:
    return AnthropicModel(
        "claude-haiku-4-5", base_url=sim.anthropic_base_url, api_key="sk-test", **settings
    )


async def refused(sim: Simulator, agent: Any, sink: Path | None = None, **options: Any) -> Any:
    """The job's refusal; nothing was sent, and its sink was never touched."""
    with pytest.raises(JobCheckError) as caught:
        await raygent.batch(
            agent, [f"q{n}" for n in range(8)], progress=False, sink=sink, **options
        )
    assert sim.stats().requests == 0
    if sink is not None:
        assert untouched(sink)
    error = caught.value
    assert error.code == "BATCH_JOB_CHECK" and error.category == "config"
    assert len(error.problems) >= 1 and all(p["fix"] for p in error.problems)
    return error


def untouched(sink: Path) -> bool:
    """Neither the sink nor the job file beside it was written."""
    return not sink.exists() and not sink.with_name(sink.name + ".job").exists()


def wheres(error: JobCheckError) -> list[str]:
    return [p["where"] for p in error.problems]


async def test_a_capability_the_model_lacks_refuses_the_job_unsent(
    backend_kind: str, tmp_path: Path
) -> None:
    async with serve() as sim:
        agent = raygent.agent(model=openai(sim), server_compaction=True)
        error = await refused(sim, agent, tmp_path / "out.jsonl")
    assert "server_compaction" in str(error) and "openai model 'gpt-4o'" in str(error)
    assert "errors.pydantic.dev" not in str(error)


async def test_invalid_option_values_are_located_and_said_without_pydantic_text(
    backend_kind: str, tmp_path: Path
) -> None:
    async with serve() as sim:
        agent = raygent.agent(model=openai(sim), name="triage")
        error = await refused(
            sim,
            agent,
            tmp_path / "out.jsonl",
            run_options={"model_options": {"temperature": "hot", "max_tokens": "many"}},
        )
    assert wheres(error) == [
        "agent 'triage': model_options.temperature",
        "agent 'triage': model_options.max_tokens",
    ]
    fixes = [p["fix"] for p in error.problems]
    assert fixes == ["give a number, or leave it out", "give an integer, or leave it out"]
    assert "(got 'hot')" in str(error) and "errors.pydantic.dev" not in str(error)


async def test_an_output_schema_openai_strict_mode_refuses_is_refused(backend_kind: str) -> None:
    # A user forcing strict Structured Outputs on a pydantic schema as pydantic makes it
    # (no additionalProperties, an optional field not required), and a function whose
    # array says nothing of its items.
    strict = {
        "type": "json_schema",
        "json_schema": {"name": "Answer", "strict": True, "schema": Answer.model_json_schema()},
    }
    loose_tool = {
        "type": "function",
        "function": {
            "name": "tag",
            "parameters": {"type": "object", "properties": {"tags": {"type": "array"}}},
        },
    }
    options = {"provider_options": {"openai": {"response_format": strict, "tools": [loose_tool]}}}
    async with serve() as sim:
        agent = raygent.agent(model=openai(sim), output=Answer, model_options=options)
        error = await refused(sim, agent)
    said = [p["problem"] for p in error.problems]
    assert any("additionalProperties: false" in s for s in said), said
    assert any("not in `required`: score" in s for s in said), said
    assert any("array schema without `items`" in s for s in said), said
    assert any(w.endswith("tool 'tag' parameters > tags") for w in wheres(error))


async def test_a_tool_schema_anthropic_strict_tools_refuse_is_refused(backend_kind: str) -> None:
    tool = {
        "name": "lookup",
        "strict": True,
        "input_schema": {
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 1}},
            "additionalProperties": False,
        },
    }
    async with serve() as sim:
        agent = raygent.agent(
            model=anthropic(sim),
            model_options={"provider_options": {"anthropic": {"tools": [tool]}}},
        )
        error = await refused(sim, agent)
    assert any("`minimum` is not supported by strict tools" in p["problem"] for p in error.problems)


async def test_a_service_tier_the_provider_does_not_have_is_refused(backend_kind: str) -> None:
    async with serve() as sim:
        error = await refused(sim, raygent.agent(model=anthropic(sim)), service_tier="flex")
    assert "'flex' is not a service tier Anthropic has (auto, standard_only)" in str(error)


async def test_images_for_a_model_without_vision_and_tools_for_one_without_tools_are_refused(
    backend_kind: str,
) -> None:
    @raygent.tool
    def lookup(q: str) -> str:
        """Look it up."""
        return q

    async with serve() as sim:
        blind = raygent.agent(model=openai(sim, "gpt-3.5-turbo"))
        error = await refused(
            sim, blind, run_options={"attachments": ["https://example.invalid/chart.png"]}
        )
        assert "1 image attachment and the model has no vision" in str(error)
        toolless = openai(sim, capabilities=Capabilities(tools=False))
        error = await refused(sim, raygent.agent(model=toolless, tools=[lookup]))
    assert "the agent has tools (lookup) and the model cannot call tools" in str(error)


@pytest.mark.parametrize("use", ["memory", "durable", "cache"])
async def test_a_store_the_job_cannot_reach_is_refused(backend_kind: str, use: str) -> None:
    dead = RedisStore(DEAD_REDIS)
    async with serve() as sim:
        if use == "memory":
            agent = raygent.agent(model=openai(sim), memory=Memory(dead))
            options: dict[str, Any] = {}
        else:
            agent = raygent.agent(model=openai(sim))
            options = (
                {"durable": raygent.Durable(store=dead)}
                if use == "durable"
                else {"cache": raygent.ResponseCache(store=dead)}
            )
        error = await refused(sim, agent, **options)
    (problem,) = error.problems
    said = {
        "memory": "the agent's memory",
        "durable": "durable runs",
        "cache": "the response cache",
    }
    assert problem["where"] == f"{said[use]} (RedisStore)"
    assert "round trip failed" in problem["problem"]


async def test_check_false_runs_a_job_the_check_would_refuse(backend_kind: str) -> None:
    # The items name no session: the agent's dead memory store is never used.
    async with serve() as sim:
        agent = raygent.agent(model=openai(sim), memory=Memory(RedisStore(DEAD_REDIS)))
        result = await raygent.batch(agent, ["a", "b"], progress=False, check=False)
    assert result.ok


async def test_a_round_trip_through_a_store_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    path = tmp_path / "one.db"
    store = SQLiteStore(path)  # the agent's memory, durable runs and the cache, all in one
    async with serve() as sim:
        agent = raygent.agent(
            model=openai(sim), memory=Memory(store), cache=raygent.ResponseCache(store=store)
        )
        result = await raygent.batch(
            agent, ["q"], progress=False, durable=raygent.Durable(store=store)
        )
    await store.aclose()
    assert result.ok
    with sqlite3.connect(path) as db:
        for table in ("raygent_conversations", "raygent_messages", "raygent_batches"):
            assert db.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
        runs = [ref for (ref,) in db.execute("SELECT ref FROM raygent_runs")]
        replies = db.execute("SELECT count(*) FROM raygent_cache").fetchone()
    assert len(runs) == 1 and "raygent-preflight" not in runs[0]  # the item's own run
    assert replies == (1,)  # the item's reply, and nothing of the check


async def test_a_sink_the_job_cannot_write_is_refused(backend_kind: str, tmp_path: Path) -> None:
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("not a folder")
    async with serve() as sim:
        error = await refused(sim, raygent.agent(model=openai(sim)), in_the_way / "out.jsonl")
    assert f"{in_the_way} is a file, not a folder" in str(error)


async def test_every_problem_is_listed_in_one_error(tmp_path: Path) -> None:
    async with serve() as sim:
        agent = raygent.agent(
            model=openai(sim),
            server_compaction=True,
            memory=Memory(RedisStore(DEAD_REDIS)),
        )
        # An agent's own model options are checked when it is built; a job's, here.
        error = await refused(
            sim,
            agent,
            tmp_path / "new-folder" / "out.jsonl",
            run_options={"model_options": {"temperature": "hot"}},
        )
    # The capability, the option (found by planning again without the first), the store;
    # a sink in a folder not made yet is no problem (the job makes it).
    found = " | ".join(p["where"] + ": " + p["problem"] for p in error.problems)
    assert "server_compaction" in found and "model_options.temperature" in found, found
    assert "the agent's memory (RedisStore)" in found, found
    assert len(error.problems) == 3, found


async def test_a_flow_s_agents_are_checked_with_their_own_options(backend_kind: str) -> None:
    async with serve() as sim:
        writer = raygent.agent(model=openai(sim), name="writer", server_compaction=True)
        flow = raygent.workflow(name="pipe", steps=[raygent.step("write", agent=writer)])
        error = await refused(sim, flow)
    assert wheres(error) == ["agent 'writer'"]


async def test_a_plain_callable_and_a_clean_agent_run_unchecked_by_anything_they_lack() -> None:
    async def double(n: int) -> int:
        return 2 * n

    assert (await raygent.batch(double, [1, 2], progress=False)).ok
    agent = raygent.agent(model=FunctionModel(lambda messages, options: "fine"))
    assert (await raygent.batch(agent, ["a"], progress=False, run_options={})).ok
    with pytest.raises(JobCheckError) as caught:  # no batch API behind a function
        await raygent.batch(agent, ["a"], progress=False, provider_batch=True)
    assert wheres(caught.value) == ["provider_batch"]


async def test_estimate_refuses_before_it_reads_or_pays_for_its_sample() -> None:
    async with serve() as sim:
        agent = raygent.agent(model=openai(sim), server_compaction=True)
        with pytest.raises(JobCheckError):
            await raygent.estimate(agent, [f"q{n}" for n in range(20)], sample=5)
        assert sim.stats().requests == 0


def test_the_cli_refuses_with_exit_status_2_and_writes_nothing(tmp_path: Path) -> None:
    target = sim_agent_module(tmp_path, "preflight_target", server_compaction="True")
    with serve() as sim:
        status, err, sink = cli_on_sim(sim.openai_base_url, tmp_path, target, 5)
        assert sim.stats().requests == 0
    assert status == 2, err
    assert "refused before its first request" in err and "server_compaction" in err
    assert untouched(sink)

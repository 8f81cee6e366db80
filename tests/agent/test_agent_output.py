"""Structured output: the schema sent, client-side validation, repair."""

from __future__ import annotations

from agent_support import City

import raygent
from raygent import Capabilities, Repair, UserMessage
from raygent.errors import MaxTripsError, SchemaValidationError
from raygent.testing import ScriptedModel

OSLO = '{"name": "Oslo", "population": 700000}'
NO_NATIVE = Capabilities(structured_output=False)
SCHEMA = {
    "title": "Pick",
    "type": "object",
    "properties": {"choice": {"enum": ["a", "b"]}},
    "required": ["choice"],
}


async def test_a_native_model_gets_the_schema_and_data_is_the_validated_instance() -> None:
    model = ScriptedModel([OSLO])
    result = await raygent.agent(model=model, output=City, system_prompt="Geo.").execute("Oslo?")
    assert result.ok
    assert isinstance(result.data, City) and result.data == City(name="Oslo", population=700000)
    assert result.text == OSLO
    sent, options = model.requests[0]
    assert options.response_schema is not None
    assert options.response_schema.name == "City"
    assert options.response_schema.json_schema == City.model_json_schema()
    assert sent[0].text == "Geo."  # no JSON instruction for a native model


async def test_other_models_get_a_json_only_instruction() -> None:
    model = ScriptedModel([OSLO], capabilities=NO_NATIVE)
    result = await raygent.agent(model=model, output=City, system_prompt="Geo.").execute("Oslo?")
    assert result.data == City(name="Oslo", population=700000)
    sent, options = model.requests[0]
    assert options.response_schema is None
    system = sent[0].text
    assert system.startswith("Geo.\n\n") and "JSON" in system and '"population"' in system
    assert result.report.system_prompt == system
    # Without a system prompt of its own, the instruction is the system prompt.
    bare = ScriptedModel([OSLO], capabilities=NO_NATIVE)
    await raygent.agent(model=bare, output=City).execute("Oslo?")
    assert bare.requests[0][0][0].role == "system"


async def test_replies_are_validated_even_when_the_model_promised_the_schema() -> None:
    model = ScriptedModel(['{"name": "Oslo", "population": "many"}'])
    result = await raygent.agent(model=model, output=City).execute("Oslo?")
    assert result.report.status == "failed"
    error = result.error
    assert isinstance(error, SchemaValidationError)
    assert error.details["issues"] == [
        "population: Input should be a valid integer, unable to parse string as an integer"
    ]
    assert result.text == '{"name": "Oslo", "population": "many"}'
    assert result.data is None


async def test_a_json_schema_works_like_a_model_type() -> None:
    model = ScriptedModel(['{"choice": "b"}', '{"choice": "c"}'])
    bot = raygent.agent(model=model, output=SCHEMA)
    result = await bot.execute("pick")
    assert result.data == {"choice": "b"}
    assert model.requests[0][1].response_schema.name == "Pick"  # type: ignore[union-attr]
    failed = await bot.execute("pick")
    assert isinstance(failed.error, SchemaValidationError)
    assert "choice" in failed.error.details["issues"][0]


async def test_code_fences_around_the_json_are_accepted() -> None:
    model = ScriptedModel([f"```json\n{OSLO}\n```"])
    result = await raygent.agent(model=model, output=City).execute("Oslo?")
    assert result.data == City(name="Oslo", population=700000)


async def test_per_call_output_replaces_the_agent_s() -> None:
    model = ScriptedModel(['{"choice": "a"}', OSLO, '{"choice": "b"}', "free text"])
    bot = raygent.agent(model=model, output=City)
    assert (await bot.execute("x", output=SCHEMA)).data == {"choice": "a"}
    assert (await bot.execute("x")).data == City(name="Oslo", population=700000)
    plain = raygent.agent(model=model)
    assert (await plain.execute("x", response_schema=SCHEMA)).data == {"choice": "b"}
    assert model.requests[2][1].response_schema is not None
    result = await plain.execute("x")
    assert result.data is None and result.text == "free text"


async def test_repair_re_asks_saying_what_failed() -> None:
    model = ScriptedModel(['{"name": "Oslo"}', "not json at all", OSLO])
    bot = raygent.agent(model=model, output=City)
    result = await bot.execute("Oslo?", repair=Repair(max_attempts=2))
    assert result.ok and result.data == City(name="Oslo", population=700000)
    assert result.text == OSLO
    assert [t.purpose for t in result.report.trips] == ["answer", "repair", "repair"]
    first_repair, _ = model.requests[1]
    assert isinstance(first_repair[-1], UserMessage)
    assert "population: Field required" in first_repair[-1].text
    assert first_repair[-2].text == '{"name": "Oslo"}'
    second_repair, _ = model.requests[2]
    assert "Invalid JSON" in second_repair[-1].text
    # Usage covers the repair trips too.
    assert result.usage.requests == 3
    assert result.usage == sum((t.usage for t in result.report.trips), raygent.Usage())


async def test_repair_gives_up_after_max_attempts() -> None:
    model = ScriptedModel(["{}", "{}", "{}"])
    result = await raygent.agent(model=model, output=City).execute(
        "Oslo?", repair=Repair(max_attempts=1)
    )
    assert isinstance(result.error, SchemaValidationError)
    assert len(model.requests) == 2
    assert result.usage.requests == 2


async def test_repair_trips_count_against_max_trips() -> None:
    model = ScriptedModel(["{}", "{}", "{}", "{}"])
    bot = raygent.agent(model=model, output=City, max_trips=2)
    result = await bot.execute("Oslo?", repair=Repair(max_attempts=5))
    assert isinstance(result.error, MaxTripsError)
    assert len(model.requests) == 2

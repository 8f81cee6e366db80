"""The providers' rules a job's check holds a request body to (`_batch.preflight.schemas`),
each against a body as the adapter builds it: OpenAI's strict Structured Outputs subset
and its function rules, Anthropic's tool schemas, and both providers' service tiers."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from raygent import UserMessage
from raygent._batch.preflight.schemas import body_problems
from raygent.models import (
    AnthropicModel,
    ModelOptions,
    OpenAIModel,
    OpenAIResponsesModel,
    ResponseSchema,
)

OFFICIAL = "https://api.openai.com/v1"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    tags: list[str]
    note: str | None  # optional the strict way: required, nullable


class Node(BaseModel):
    model_config = ConfigDict(extra="forbid")
    value: int
    children: list[Node]


def strict_output(schema: dict[str, Any], name: str = "Answer") -> dict[str, Any]:
    """An OpenAI Chat Completions body asking strict Structured Outputs of `schema`."""
    model = OpenAIModel("gpt-4o", base_url=OFFICIAL, api_key="sk-test")
    options = ModelOptions(response_schema=ResponseSchema(name=name, schema=schema, strict=True))
    return model.request_body([UserMessage(content="q")], options, stream=False)


def problems(body: dict[str, Any], provider: str = "openai", url: str = OFFICIAL) -> list[str]:
    return [f"{p.where}: {p.problem}" for p in body_problems(provider, url, body, "at")]


def nested(depth: int) -> dict[str, Any]:
    """An object schema `depth` objects deep, strict in every other way."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {
            "type": "object",
            "properties": {"inner": schema},
            "required": ["inner"],
            "additionalProperties": False,
        }
    return schema


def test_a_strict_pydantic_schema_and_a_recursive_one_pass() -> None:
    assert problems(strict_output(Strict.model_json_schema())) == []
    assert problems(strict_output(Node.model_json_schema())) == []  # recursion is allowed


def test_strict_objects_need_additional_properties_false_and_every_property_required() -> None:
    class Loose(BaseModel):
        name: str
        score: int = 0

    found = problems(strict_output(Loose.model_json_schema(), "Loose"))
    assert found == [
        "at: output type 'Loose' schema (strict): an object without `additionalProperties: false`",
        "at: output type 'Loose' schema (strict): properties not in `required`: score",
    ]


def test_strict_schemas_refuse_composition_keywords_and_refs_with_siblings() -> None:
    class Inner(BaseModel):
        model_config = ConfigDict(extra="forbid")
        x: int

    class Outer(BaseModel):
        model_config = ConfigDict(extra="forbid")
        inner: Inner = Field(description="the inner one")

    schema = Outer.model_json_schema()
    schema["properties"]["either"] = {"oneOf": [{"type": "string"}, {"type": "integer"}]}
    schema["required"].append("either")
    found = problems(strict_output(schema, "Outer"))
    assert any("> inner: `$ref` with other keywords beside it (description)" in f for f in found)
    assert any("> either: `oneOf` is not supported in strict mode" in f for f in found)
    root = {"anyOf": [{"type": "object"}, {"type": "string"}]}
    (union,) = problems(strict_output(root))
    assert "a JSON schema of type \"object\" here, not 'anyOf'" in union


def test_strict_limits_of_nesting_and_enum_size() -> None:
    assert problems(strict_output(nested(10))) == []
    (deep,) = problems(strict_output(nested(11)))
    assert "11 levels of nesting; strict schemas allow at most 10" in deep
    many = [f"value-{n:05d}-" + "x" * 60 for n in range(300)]  # over 15,000 characters
    schema = nested(1)
    schema["properties"]["inner"] = {"type": "string", "enum": many}
    (long,) = problems(strict_output(schema))
    assert "an enum of more than 250 strings over 15,000 characters" in long


def test_a_functions_arrays_say_what_they_hold_and_names_follow_the_pattern() -> None:
    body = {
        "model": "gpt-4o",
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "tag it",
                    "parameters": {"type": "object", "properties": {"xs": {"type": "array"}}},
                },
            },
            {"type": "function", "function": {"name": "scalar", "parameters": {"type": "string"}}},
        ],
    }
    assert problems(body) == [
        "at: tool 'tag it': OpenAI takes names of letters, digits, _ and - (1 to 64)",
        "at: tool 'tag it' parameters > xs: an array schema without `items`: OpenAI refuses it",
        "at: tool 'scalar' parameters: OpenAI takes a JSON schema of type \"object\" here, "
        "not 'string'",
    ]


def test_the_responses_wire_is_read_the_same_way() -> None:
    model = OpenAIResponsesModel("gpt-4o", base_url=OFFICIAL, api_key="sk-test")
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    options = ModelOptions(response_schema=ResponseSchema(name="A", schema=schema, strict=True))
    body = model.request_body([UserMessage(content="q")], options, stream=False)
    assert any("additionalProperties" in f for f in problems(body))


def test_service_tiers_each_provider_has() -> None:
    assert problems({"service_tier": "flex"}) == []
    assert problems({"service_tier": "scale"}) == []
    (slow,) = problems({"service_tier": "slow"})
    assert "'slow' is not a service tier OpenAI has" in slow
    # An OpenAI-compatible server names tiers of its own: not OpenAI's rules.
    assert problems({"service_tier": "on_demand"}, url="http://127.0.0.1:8000/v1") == []
    model = AnthropicModel("claude-haiku-4-5", api_key="sk-test", service_tier="priority")  # type: ignore[typeddict-item]
    body = model.request_body([UserMessage(content="q")], None, stream=False)
    (priority,) = problems(body, "anthropic", model.base_url)
    assert "'priority' is not a service tier Anthropic has (auto, standard_only)" in priority


def test_anthropic_tool_schemas_and_strict_tools() -> None:
    recursive = Node.model_json_schema()
    body = {
        "tools": [
            {"name": "ok_tool", "input_schema": {"type": "object", "properties": {}}},
            {"name": "a" * 129, "input_schema": {"type": "object"}},
            {"name": "list_tool", "input_schema": {"type": "array"}},
            {
                "name": "bounded",
                "strict": True,
                "input_schema": {
                    "type": "object",
                    "properties": {
                        "n": {"type": "integer", "maximum": 9},
                        "xs": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                    },
                    "additionalProperties": False,
                },
            },
            {"name": "tree", "strict": True, "input_schema": recursive},
            {"type": "web_search_20250305", "name": "web_search"},  # a server tool
        ]
    }
    found = problems(body, "anthropic", "https://api.anthropic.com")
    assert found == [
        f"at: tool '{'a' * 129}': Anthropic takes names of letters, digits, _ and - (1 to 128)",
        "at: tool 'list_tool' input_schema: Anthropic takes a JSON schema of type \"object\" "
        "here, not 'array'",
        "at: tool 'bounded' input_schema (strict) > n: `maximum` is not supported by strict tools",
        "at: tool 'bounded' input_schema (strict) > xs: `minItems` other than 0 or 1 in a "
        "strict tool",
        "at: tool 'tree' input_schema (strict) > children > items: a recursive schema: strict "
        "tools refuse it",
    ]

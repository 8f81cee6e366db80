"""Values generated for a JSON schema validate against it (jsonschema and pydantic)."""

from __future__ import annotations

import datetime
import enum
import uuid
from typing import Annotated, Any, Literal

import jsonschema
import pytest
from pydantic import BaseModel, Field
from pydantic_core import to_json

from raygent.sim._schema_instance import schema_instance


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    street: str = Field(min_length=12)
    zip_code: Annotated[str, Field(max_length=5)]
    country: Literal["FR", "DE"] = "FR"


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int = Field(ge=1, le=9)


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


class Node(BaseModel):
    value: int
    children: list[Node] = []


class Everything(BaseModel):
    name: str
    count: int = Field(gt=10, multiple_of=5)
    ratio: float = Field(ge=0.5, le=0.75)
    maybe: str | None
    colour: Colour
    address: Address
    addresses: list[Address] = Field(min_length=2)
    pet: Annotated[Cat | Dog, Field(discriminator="kind")]
    either: int | str
    pair: tuple[int, str]
    scores: dict[str, float]
    when: datetime.datetime
    day: datetime.date
    ident: uuid.UUID
    email: str = Field(json_schema_extra={"format": "email"})
    tree: Node
    unique: set[str] = Field(min_length=3)


@pytest.mark.parametrize("model", [Address, Cat, Node, Everything])
def test_pydantic_models(model: type[BaseModel]) -> None:
    schema = model.model_json_schema()
    value = schema_instance(schema)
    jsonschema.validate(value, schema)
    model.model_validate_json(to_json(value))


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "enum": ["a", "b"]},
        {"const": 3},
        {"type": ["null", "integer"], "minimum": 4},
        {"type": "array", "items": {"type": "string", "format": "uri"}, "minItems": 3},
        {"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 2},
        {"type": "integer", "exclusiveMaximum": -3},
        {"anyOf": [{"type": "null"}, {"type": "string"}]},
        {
            "allOf": [
                {"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"b": {"type": "boolean"}}, "required": ["b"]},
            ]
        },
        {
            "type": "object",
            "properties": {"x": {"$ref": "#/definitions/X"}},
            "required": ["x"],
            "definitions": {"X": {"type": "string", "format": "date-time"}},
        },
        {"type": "object", "required": ["free"]},
        {"type": "string", "minLength": 20, "maxLength": 25},
        {},
    ],
)
def test_schema_keywords(schema: dict[str, Any]) -> None:
    jsonschema.validate(schema_instance(schema), schema)

"""@tool: schemas from signatures and docstrings, validated invocation, timeouts, pickling."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import enum
import functools
import json
import pathlib
import pickle
import threading
import uuid
from typing import TYPE_CHECKING, Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from raygent.errors import ToolExecutionError
from raygent.tools import (
    Tool,
    ToolArgumentsError,
    ToolContext,
    ToolTimeoutError,
    parse_docstring,
    tool,
    tool_result_text,
)

if TYPE_CHECKING:
    from collections import OrderedDict

CTX = ToolContext(
    run_id="run_1",
    root_run_id="run_1",
    session_id="s1",
    call_id="call_1",
    tool_name="t",
    trip_index=0,
    deps={"db": "fake"},
)


@tool
def search(query: str, limit: int = 5) -> list[str]:
    """Search the web.

    Results come back best first.

    Args:
        query: what to look for.
        limit (int): how many results,
            at most.

    Returns:
        The result titles.
    """
    return [f"{query} {i}" for i in range(limit)]


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    street: str
    city: str = "Paris"


@tool(name="calc", inline=True, idempotent=True, timeout=10, retries=2, num_cpus=0.5)
async def calculate(expr: str, ctx: ToolContext) -> float:
    """Evaluate an arithmetic expression."""
    await asyncio.sleep(0)
    return float(len(expr)) if ctx.deps else 0.0


@tool
def kitchen_sink(
    address: Address,
    color: Color,
    mode: Literal["fast", "slow"],
    tags: list[str],
    weights: dict[str, float],
    note: str | None = None,
    count: Annotated[int, Field(ge=1, le=10, description="from the Field")] = 1,
) -> dict[str, Any]:
    """Everything at once.

    Args:
        count: from the docstring (the Field wins).
        note: an optional note.
    """
    return {"address": address, "color": color, "mode": mode, "count": count}


def test_schema_from_signature_and_docstring() -> None:
    spec = search.spec()
    assert spec.name == "search"
    assert spec.description == "Search the web.\n\nResults come back best first."
    params = spec.parameters
    assert params["type"] == "object"
    assert params["required"] == ["query"]
    assert params["additionalProperties"] is False
    query, limit = params["properties"]["query"], params["properties"]["limit"]
    assert query["type"] == "string" and query["description"] == "what to look for."
    assert limit == {
        "type": "integer",
        "default": 5,
        "description": "how many results, at most.",
        "title": "Limit",
    }


def test_schema_of_rich_types() -> None:
    params = kitchen_sink.spec().parameters
    props = params["properties"]
    assert set(params["required"]) == {"address", "color", "mode", "tags", "weights"}
    assert props["address"] == {"$ref": "#/$defs/Address"}
    assert params["$defs"]["Address"]["required"] == ["street"]
    assert params["$defs"]["Color"]["enum"] == ["red", "blue"]
    assert props["mode"]["enum"] == ["fast", "slow"]
    assert props["tags"] == {"type": "array", "items": {"type": "string"}, "title": "Tags"}
    assert props["weights"]["additionalProperties"] == {"type": "number"}
    assert {"type": "null"} in props["note"]["anyOf"] and props["note"]["default"] is None
    assert props["note"]["description"] == "an optional note."
    assert props["count"]["description"] == "from the Field"
    assert (props["count"]["minimum"], props["count"]["maximum"]) == (1, 10)


async def test_invoke_validates_into_rich_types() -> None:
    arguments = {
        "address": {"street": "rue X"},
        "color": "blue",
        "mode": "fast",
        "tags": [],
        "weights": {"a": 1},
    }
    result = await kitchen_sink.invoke(arguments, CTX)
    assert result["address"] == Address(street="rue X", city="Paris")
    assert result["color"] is Color.BLUE and result["count"] == 1
    with pytest.raises(ToolArgumentsError, match="count: Input should be less than or equal"):
        await kitchen_sink.invoke({**arguments, "count": 11}, CTX)


def test_compact_spec_strips_descriptions_titles_examples_and_defaults() -> None:
    @tool
    def annotate(
        title: Annotated[str, Field(description="the title", examples=["Dune"])],
        description: str = "none",
    ) -> str:
        """A tool whose parameters are named like schema keywords."""
        return title + description

    spec = annotate.spec(compact=True)
    assert spec.description == ""
    assert spec.parameters == {
        "type": "object",
        "properties": {"title": {"type": "string"}, "description": {"type": "string"}},
        "required": ["title"],
        "additionalProperties": False,
    }
    compact_sink = json.dumps(kitchen_sink.spec(compact=True).parameters)
    assert '"title"' not in compact_sink and '"description"' not in compact_sink
    assert '"default"' not in compact_sink and "Address" in compact_sink  # $defs kept
    # The full spec is untouched by compaction.
    assert annotate.spec().parameters["properties"]["title"]["examples"] == ["Dune"]


async def test_compact_mode_does_not_loosen_validation() -> None:
    search.spec(compact=True)
    with pytest.raises(ToolArgumentsError):
        await search.invoke({"query": 3}, CTX)


def test_specs_are_computed_once() -> None:
    assert search.spec() is search.spec()
    assert search.spec(compact=True) is search.spec(compact=True)


async def test_sync_tool_runs_in_a_worker_thread() -> None:
    @tool
    def where() -> int:
        return threading.get_ident()

    assert await where.invoke({}, CTX) != threading.get_ident()


async def test_async_tool_is_awaited_on_the_loop_with_context() -> None:
    @tool
    async def where(ctx: ToolContext) -> tuple[int, ToolContext]:
        return threading.get_ident(), ctx

    ident, ctx = await where.invoke({}, CTX)
    assert ident == threading.get_ident() and ctx is CTX
    assert await calculate.invoke({"expr": "1+2"}, CTX) == 3.0


async def test_context_is_injected_and_never_in_the_schema() -> None:
    @tool
    def typed(x: int, context: ToolContext) -> str:
        return f"{x} {context.call_id} {context.deps['db']}"

    @tool
    def untyped(ctx, x: int) -> str:
        return f"{x} {ctx.run_id}"

    assert typed.ctx_param == "context" and untyped.ctx_param == "ctx"
    assert calculate.spec().parameters["properties"].keys() == {"expr"}
    assert typed.spec().parameters["properties"].keys() == {"x"}
    assert await typed.invoke({"x": 1}, CTX) == "1 call_1 fake"
    assert await untyped.invoke({"x": 2}, CTX) == "2 run_1"
    with pytest.raises(ToolArgumentsError, match="ctx: Extra inputs"):
        await untyped.invoke({"x": 2, "ctx": {}}, CTX)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "invalid arguments for tool 'search': query: Field required"),
        ({"query": "x", "limit": "many"}, "limit: Input should be a valid integer"),
        ({"query": "x", "page": 2}, "page: Extra inputs are not permitted"),
        (None, "invalid arguments for tool 'search': the arguments are not a valid JSON object"),
    ],
    ids=["missing", "wrong-type", "extra", "not-json"],
)
async def test_bad_arguments_raise_an_error_the_model_can_act_on(
    arguments: dict[str, Any] | None, message: str
) -> None:
    with pytest.raises(ToolArgumentsError) as caught:
        await search.invoke(arguments, CTX)
    err = caught.value
    assert message in str(err)
    assert (err.code, err.category, err.retryable) == ("TOOL_INVALID_ARGUMENTS", "tool", False)
    assert err.tool == "search"
    json.dumps(err.to_dict())  # issues are JSON-ready for reports
    if arguments is not None:
        assert err.issues and err.issues[0]["loc"]
    assert pickle.loads(pickle.dumps(err)).issues == err.issues


async def test_all_problems_are_reported_at_once() -> None:
    with pytest.raises(ToolArgumentsError) as caught:
        await search.invoke({"limit": "x", "page": 1}, CTX)
    assert len(caught.value.issues) == 3
    assert str(caught.value).count(";") == 2


async def test_timeout_raises_tool_timeout_error() -> None:
    @tool(timeout=0.2)
    async def stuck() -> None:
        await asyncio.Event().wait()

    with pytest.raises(ToolTimeoutError, match=r"'stuck' timed out after 0\.2s") as caught:
        await stuck.invoke({}, CTX)
    assert (caught.value.code, caught.value.category) == ("TOOL_TIMEOUT", "tool")
    assert not caught.value.retryable and caught.value.timeout == 0.2


async def test_a_timeout_error_raised_by_the_tool_itself_is_not_ours() -> None:
    @tool(timeout=5)
    async def flaky() -> None:
        raise TimeoutError("upstream")

    with pytest.raises(TimeoutError, match="upstream") as caught:
        await flaky.invoke({}, CTX)
    assert not isinstance(caught.value, ToolTimeoutError)


async def test_errors_from_the_tool_propagate_unchanged() -> None:
    @tool
    def broken() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        await broken.invoke({}, CTX)


def _star_args(*items: int) -> None: ...
def _star_kwargs(**options: int) -> None: ...
def _no_hint(x, y: int) -> None: ...
def _positional_only(x: int, /) -> None: ...
def _two_contexts(a: ToolContext, b: ToolContext) -> None: ...


@pytest.mark.parametrize(
    ("fn", "name", "message"),
    [
        (_star_args, None, r"\*args and \*\*kwargs"),
        (_star_kwargs, None, r"\*args and \*\*kwargs"),
        (_no_hint, None, "parameter 'x' has no type hint"),
        (_positional_only, None, "positional-only parameter 'x'"),
        (_two_contexts, None, "more than one ToolContext"),
        (search.fn, "web search", "tool name 'web search' is not allowed"),
        (search.fn, "x" * 65, "is not allowed"),
        (search.fn, "", "is not allowed"),
        (lambda q: q, None, "tool name '<lambda>' is not allowed"),
    ],
)
def test_decoration_rejects_what_a_model_cannot_call(
    fn: Any, name: str | None, message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        tool(name=name)(fn)


async def test_partials_callable_objects_and_type_checking_only_return_types() -> None:
    def scaled(x: int, factor: int) -> OrderedDict[str, int]:  # only imported for mypy
        return {"x": x * factor}

    class Doubler:
        async def __call__(self, x: int) -> int:
            return 2 * x

    partial_tool = tool(name="scaled")(functools.partial(scaled, factor=3))
    assert partial_tool.spec().parameters["properties"]["factor"]["default"] == 3
    assert await partial_tool.invoke({"x": 2}, CTX) == {"x": 6}
    doubler = tool(name="double")(Doubler())
    assert doubler.is_async and await doubler.invoke({"x": 4}, CTX) == 8


def test_unresolvable_type_hints_are_a_clear_type_error() -> None:
    class Local(BaseModel):
        x: int

    def uses_local(item: Local) -> None: ...

    with pytest.raises(TypeError, match="cannot resolve the type hint 'Local'"):
        tool(uses_local)


@pytest.mark.parametrize("options", [{"timeout": 0}, {"retries": -1}, {"num_cpus": -1.0}], ids=str)
def test_bad_execution_options_are_rejected(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        tool(**options)


def test_names_and_options() -> None:
    assert tool(name="a-b_9" + "x" * 59)(search.fn).name.startswith("a-b_9")
    assert (calculate.name, calculate.inline, calculate.idempotent) == ("calc", True, True)
    assert (calculate.timeout, calculate.retries, calculate.num_cpus) == (10, 2, 0.5)
    assert (search.timeout, search.retries, search.inline) == (None, 0, False)
    assert search.resources is None and search.runtime_env is None
    assert calculate.is_async and not search.is_async
    assert tool(description="Custom.")(search.fn).spec().description == "Custom."
    assert isinstance(tool(search), Tool) and tool(search).fn is search.fn


async def test_a_tool_stays_callable_like_its_function() -> None:
    assert search("x", limit=2) == ["x 0", "x 1"]
    assert await calculate("12", CTX) == 2.0


async def test_parameters_named_like_model_attributes_keep_their_names() -> None:
    @tool
    def query_db(json: bool, schema: str, _limit: int = 3, model_name: str = "m") -> str:
        return f"{json} {schema} {_limit} {model_name}"

    props = query_db.spec().parameters["properties"]
    assert list(props) == ["json", "schema", "_limit", "model_name"]
    arguments = {"json": True, "schema": "public", "_limit": 7}
    assert await query_db.invoke(arguments, CTX) == "True public 7 m"
    with pytest.raises(ToolArgumentsError, match="schema: Field required"):
        await query_db.invoke({"json": True}, CTX)


async def test_cloudpickle_round_trip() -> None:
    cloudpickle = pytest.importorskip("ray.cloudpickle")
    for original in (search, calculate, kitchen_sink):
        clone = cloudpickle.loads(cloudpickle.dumps(original))
        assert clone.name == original.name and clone.timeout == original.timeout
        assert clone.spec() == original.spec()
    clone = cloudpickle.loads(cloudpickle.dumps(search))
    assert await clone.invoke({"query": "q", "limit": 1}, CTX) == ["q 0"]
    with pytest.raises(ToolArgumentsError):
        await clone.invoke({"query": "q", "extra": 1}, CTX)
    clone_calc = cloudpickle.loads(cloudpickle.dumps(calculate))
    assert await clone_calc.invoke({"expr": "123"}, CTX) == 3.0


def test_docstring_parsing_styles() -> None:
    google = """Summary line.

    More text.

    Arguments:
        first (str, optional): one
            and more.
        second: two.
    Raises:
        third: not a parameter.
    """
    assert parse_docstring(google) == (
        "Summary line.\n\nMore text.",
        {"first": "one and more.", "second": "two."},
    )
    sphinx = """Do it.

    :param str first: one
        continued.
    :param second: two.
    :returns: nothing.
    """
    assert parse_docstring(sphinx) == ("Do it.", {"first": "one continued.", "second": "two."})
    numpy = "Do it.\n\nParameters\n----------\nfirst : int\n    one.\n"
    assert parse_docstring(numpy)[0] == "Do it."
    assert parse_docstring(None) == ("", {})


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Opaque:
    def __str__(self) -> str:
        return "opaque!"


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("plain", "plain"),
        ("", ""),
        (Address(street="s"), '{"street":"s","city":"Paris"}'),
        (Point(1, 2), '{"x":1,"y":2}'),
        ({"a": [1, 2.5, None]}, '{"a":[1,2.5,null]}'),
        ([True, "é"], '[true,"é"]'),
        (42, "42"),
        (False, "false"),
        (None, "null"),
        (datetime.datetime(2024, 5, 1, 12, 30), '"2024-05-01T12:30:00"'),
        (datetime.date(2024, 5, 1), '"2024-05-01"'),
        (datetime.time(8, 15), '"08:15:00"'),
        (decimal.Decimal("1.50"), '"1.50"'),
        (uuid.UUID(int=1), '"00000000-0000-0000-0000-000000000001"'),
        (Color.RED, '"red"'),
        ({3}, "[3]"),
        ((1, "a"), '[1,"a"]'),
        (b"raw", '"raw"'),
        ([b"ok", b"\xff"], '["b2s=","_w=="]'),  # not all UTF-8: URL-safe base64
        (pathlib.PurePosixPath("/tmp/x.txt"), '"/tmp/x.txt"'),
        (
            {"when": datetime.date(2024, 1, 2), "at": [Point(0, 1)]},
            '{"when":"2024-01-02","at":[{"x":0,"y":1}]}',
        ),
    ],
    ids=repr,
)
def test_tool_result_text(value: Any, text: str) -> None:
    assert tool_result_text(value) == text


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (Opaque(), "a value of type Opaque"),
        ({"o": [Opaque()]}, "a dict holding a value of type Opaque"),
        (Unprintable(), "a value of type Unprintable"),
    ],
    ids=repr,
)
def test_a_result_with_no_json_form_is_a_tool_error_naming_its_type(value: Any, said: str) -> None:
    with pytest.raises(ToolExecutionError) as raised:
        tool_result_text(value, "fetch")
    message = str(raised.value)
    assert f"tool 'fetch' returned {said} that cannot be sent as JSON" in message
    assert " at 0x" not in message and "opaque!" not in message
    assert raised.value.details["tool"] == "fetch"


def test_a_parameter_type_without_a_schema_names_the_tool_and_the_parameter() -> None:
    with pytest.raises(TypeError) as raised:

        @tool
        def guarded(count: int, lock: threading.Lock) -> str:  # type: ignore[valid-type]
            """Count under a lock."""
            return str(count)

    said = str(raised.value)
    assert said.startswith("tool 'guarded': parameter 'lock' has a type")
    assert "PydanticSchemaGenerationError" in said and "count" not in said.split(":")[1]

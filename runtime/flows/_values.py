"""The values that go between steps: a step's output (extracted and
validated), a flow's text, and calling a hook that may be sync or async."""

from __future__ import annotations

import inspect
import json
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import FlowOutputError
from ..observers.report import FlowResult

__all__ = ["as_text", "call_hook", "child_validated", "result_value", "validated"]


async def call_hook(fn: Any, *args: Any) -> Any:
    """Call `fn(*args)` on the loop, awaiting what it returns when it is awaitable."""
    value = fn(*args)
    if inspect.isawaitable(value):
        value = await value
    return value


def as_text(value: Any) -> str:
    """A step's or a flow's output as text."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        return json.dumps(value, default=_plain, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return str(value)


def result_value(result: Any) -> Any:
    """A child's output: a flow's `data`; an agent's `data`, or its text without one."""
    if isinstance(result, FlowResult):
        return result.data
    data = getattr(result, "data", None)
    return data if data is not None else getattr(result, "text", None)


def child_validated(result: Any, model: type[BaseModel], step: str | None) -> BaseModel:
    """A child's output as `model`: its `data` when it already is one (or, for a flow,
    any data that validates), else its text as JSON."""
    data = getattr(result, "data", None)
    if isinstance(data, model):
        return data
    if isinstance(result, FlowResult):
        return validated(data, model, step)
    return validated(getattr(result, "text", ""), model, step)


def validated(value: Any, model: type[BaseModel], step: str | None) -> BaseModel:
    """`value` (the model, another model, a dict, JSON text) validated as `model`, or a
    FlowOutputError naming the step (None: the flow's own output)."""
    if isinstance(value, model):
        return value
    try:
        if isinstance(value, (str, bytes)):
            return model.model_validate_json(value)
        if isinstance(value, BaseModel):
            return model.model_validate(value.model_dump())
        return model.model_validate(value)
    except ValidationError as exc:
        where = "the output" if step is None else f"step {step!r}'s output"
        raise FlowOutputError(
            f"{where} does not match {model.__name__}: {exc.error_count()} issue(s)",
            step=step,
            issues=exc.errors(include_url=False, include_context=False, include_input=False),
        ) from None

"""A problem a job check found (where, what, how to fix it), and the one error that refuses
the job with all of them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import ValidationError

from ...errors import JobCheckError, RaygentError

__all__ = ["Problem", "from_error", "from_validation", "refusal"]

# What a pydantic error type asks for, in a fix's words.
_WANTED = {
    "float_parsing": "a number",
    "float_type": "a number",
    "int_parsing": "an integer",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": "a string",
    "dict_type": "a mapping",
    "list_type": "a list",
    "tuple_type": "a list",
}
_SHOWN = 60  # characters of a given value shown in a problem


@dataclass(frozen=True)
class Problem:
    """One thing a job cannot do: `where` names the item of configuration, `problem`
    what is wrong with it, `fix` what to do."""

    where: str
    problem: str
    fix: str

    def lines(self) -> str:
        return f"  - {self.where}: {self.problem}\n    fix: {self.fix}"


def refusal(problems: Sequence[Problem]) -> JobCheckError:
    """The job's refusal, every problem listed (and how to fix it)."""
    count = len(problems)
    head = (
        f"the job was refused before its first request, nothing sent or written "
        f"({count} problem{'s' if count != 1 else ''}):"
    )
    lines = "\n".join(p.lines() for p in problems)
    return JobCheckError(f"{head}\n{lines}", problems=[asdict(p) for p in problems])


def from_validation(exc: ValidationError, where: str) -> list[Problem]:
    """One problem per pydantic error, located under `where` (e.g. "agent 'x':
    model_options"), with the value given and what is wanted instead."""
    problems = []
    for error in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in error["loc"])
        place = f"{where}.{loc}" if loc else where
        kind = error["type"]
        if kind == "extra_forbidden":
            problems.append(Problem(place, "not an option it takes", "remove it"))
            continue
        value = _shown(error.get("input"))
        wanted = _WANTED.get(kind) or _expected(error) or "a valid value"
        problems.append(
            Problem(place, f"{error['msg']} (got {value})", f"give {wanted}, or leave it out")
        )
    return problems


def from_error(exc: BaseException, where: str, fix: str | None = None) -> Problem:
    """An error a check met (a raygent error's message, else its type and text)."""
    said = str(exc) if isinstance(exc, RaygentError) else f"{type(exc).__name__}: {exc}"
    return Problem(where, said, fix or _fix_of(exc))


def _fix_of(exc: BaseException) -> str:
    capability = getattr(exc, "capability", None) if isinstance(exc, RaygentError) else None
    if capability:
        return (
            f"leave {capability} out for this model, or use a model that has it "
            f"(or declare Capabilities({capability}=True) on a model that can)"
        )
    code = getattr(exc, "code", None)
    if code == "PROMPT":
        return "give the placeholder a value (placeholders=)"
    return "change the option named, or leave it out"


def _expected(error: Mapping[str, Any]) -> str | None:
    expected = (error.get("ctx") or {}).get("expected")
    return f"one of {expected}" if expected else None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"

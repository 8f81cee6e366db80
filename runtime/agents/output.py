"""Structured output: the schema sent to the model, and client-side validation of replies."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from ..errors import SchemaValidationError
from ..models.contract import ResponseSchema

__all__ = ["OutputSpec", "Repair"]

_FENCE = re.compile(r"^\s*```(?:json|JSON)?\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


@dataclass(frozen=True)
class Repair:
    """Re-ask the model up to `max_attempts` times when its reply fails validation.
    Each repair is a trip and counts against `max_trips`."""

    max_attempts: int = 1


class OutputSpec:
    """The expected reply: a pydantic model (or any type pydantic can validate), or a
    JSON schema (dict). Replies are always validated here, whatever the model promised."""

    def __init__(self, output: Any) -> None:
        self.output = output
        if isinstance(output, dict):
            self.name = str(output.get("title") or "response")
            self.schema: dict[str, Any] = output
            self._adapter: TypeAdapter[Any] | None = None
            import jsonschema  # here: ~25 ms to import, paid only by a dict schema

            self._validator: Any = jsonschema.Draft202012Validator(output)
        else:
            self.name = getattr(output, "__name__", "response")
            self._adapter = TypeAdapter(output)
            self.schema = self._adapter.json_schema()
            self._validator = None
        self.name = re.sub(r"[^a-zA-Z0-9_-]", "_", self.name)[:64] or "response"

    def response_schema(self) -> ResponseSchema:
        # strict=False: pydantic schemas rarely meet OpenAI's strict subset; the reply is
        # validated here either way.
        return ResponseSchema(name=self.name, json_schema=self.schema, strict=False)

    def instruction(self) -> str:
        """For models without native structured output."""
        return (
            "Reply with only a JSON value that satisfies this JSON schema, with no prose "
            f"and no code fences:\n{json.dumps(self.schema, separators=(',', ':'))}"
        )

    def validate(self, text: str) -> Any:
        """The validated value, or SchemaValidationError with issues a model can act on."""
        candidate = _json_text(text)
        if self._adapter is not None:
            try:
                return self._adapter.validate_json(candidate)
            except ValidationError as exc:
                issues = [
                    f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
                    for e in exc.errors(include_url=False)
                ]
                raise _invalid(issues, text) from None
        try:
            value = json.loads(candidate)
        except ValueError as exc:
            raise _invalid([f"(root): not valid JSON: {exc}"], text) from None
        errors = sorted(self._validator.iter_errors(value), key=lambda e: list(e.path))
        if errors:
            issues = [f"{'.'.join(map(str, e.path)) or '(root)'}: {e.message}" for e in errors]
            raise _invalid(issues, text)
        return value


def _json_text(text: str) -> str:
    fenced = _FENCE.match(text)
    return fenced.group(1) if fenced else text.strip()


def _invalid(issues: list[str], text: str) -> SchemaValidationError:
    summary = "; ".join(issues[:5]) + (f" (+{len(issues) - 5} more)" if len(issues) > 5 else "")
    return SchemaValidationError(
        f"the reply does not satisfy the output schema: {summary}",
        issues=issues,
        text=text[:2000],
    )

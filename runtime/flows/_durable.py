"""A durable flow run's record in a run store: a header (the flow's signature and input),
one entry per settled step (its report, its output, where the flow goes next, usage so
far), and the outcome. A resume rebuilds the state from the entries and goes on from
the step after the last settled one: settled steps (and the runs they made) are not run
again; the step that had not settled runs again from its start.

The record's skeleton (epoch fence, claim, entries, outcome) is `raygent.durable.journal`;
the scope is `raygent.durable.scope`. Outputs are kept as JSON: a step whose output is a
model (`output=Model`) gets it back validated; other outputs come back as their JSON
values (dicts, lists, str, numbers).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from raygent.stores import Scope

from ..durable.journal import RunJournal, encoded, load
from ..durable.options import Durable
from ..errors import DriftError, RunNotFoundError
from ..observers.report import FlowReport, StepReport
from ..usage import Usage

__all__ = ["FlowEntry", "FlowHeader", "FlowJournal", "FlowOutcome", "Restored"]


class FlowHeader(BaseModel):
    model_config = ConfigDict(extra="ignore")
    kind: str
    name: str
    signature: dict[str, Any]
    run_id: str
    root_run_id: str
    started_at: datetime
    input: Any = None


class FlowEntry(BaseModel):
    model_config = ConfigDict(extra="ignore")
    step: StepReport
    # The other steps settled with it (a supervisor's iteration: its intents).
    more_steps: list[StepReport] = Field(default_factory=list)
    output: Any = None
    # The step to run next (None: the flow's end), and the flow's own counters.
    next: str | None = None
    position: dict[str, Any] = Field(default_factory=dict)
    usage: Usage = Field(default_factory=Usage)


class FlowOutcome(BaseModel):
    model_config = ConfigDict(extra="ignore")
    report: FlowReport
    data: Any = None
    text: str = ""
    outputs: dict[str, Any] = Field(default_factory=dict)
    usage: Usage = Field(default_factory=Usage)


def _json(model: BaseModel) -> bytes:
    return encoded(model, fallback=repr)


@dataclass
class Restored:
    """What a resume starts from: the header, the settled steps, the outcome if ended."""

    header: FlowHeader
    entries: list[FlowEntry]
    outcome: FlowOutcome | None
    journal: FlowJournal


class FlowJournal(RunJournal):
    """Writes one flow run's record; `epoch` is the fencing token its writes carry."""

    async def start(self, header: FlowHeader) -> None:
        await self.begin(_json(header))

    async def settled(self, entry: FlowEntry) -> None:
        await self.append(_json(entry))

    async def finish(self, outcome: FlowOutcome) -> None:
        await self.end(_json(outcome))

    @classmethod
    async def restore(
        cls, durable: Durable, scope: Scope, signature: dict[str, Any], *, force: bool
    ) -> Restored:
        """Load the run and take it over (its epoch goes up: an older writer is fenced
        off). A drifted signature raises DriftError before anything is claimed."""
        record = await load(durable, scope)
        if record is None:
            raise RunNotFoundError(f"no durable run is stored under {scope.session_id!r}")
        header = FlowHeader.model_validate_json(record.header)
        changed = sorted(
            key
            for key in set(header.signature) | set(signature)
            if header.signature.get(key) != signature.get(key)
        )
        if changed and not force:
            raise DriftError(
                f"the {header.kind} {header.name!r} changed since the run was stored: "
                + ", ".join(changed),
                changed=changed,
                stored={k: header.signature.get(k) for k in changed},
                current={k: signature.get(k) for k in changed},
            )
        outcome = (
            None if record.outcome is None else FlowOutcome.model_validate_json(record.outcome)
        )
        entries = [FlowEntry.model_validate_json(e) for e in record.entries]
        if outcome is None:
            journal = await cls.claim(durable, scope, record)
        else:
            journal = cls.held(durable, scope, record)
        return Restored(header, entries, outcome, journal)

"""The journal of a durable run, one skeleton for agents and flows: a header when the
run starts, an entry after every settled step (a trip, a workflow step, a supervisor
iteration), an outcome at its end, each written to the run store under the run's scope
and fenced by its epoch (a writer whose run was claimed since is refused).

What a header, an entry and an outcome hold is the user's (agents: `agents._journal`,
flows: `flows._durable`); they come here encoded. A resume loads the run, checks what
it must, and claims it (the epoch goes up: an older writer is fenced off) before it
writes on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from .options import Durable

if TYPE_CHECKING:
    from raygent.stores import Scope
    from raygent.stores.protocol import RunRecord

__all__ = ["RunJournal", "encoded", "is_stored", "load"]

J = TypeVar("J", bound="RunJournal")


@dataclass
class RunJournal:
    """Writes one run's record; `epoch` is the fencing token its writes carry, `seq` the
    number of the next entry."""

    durable: Durable
    scope: Scope
    epoch: int = 0
    seq: int = 0

    async def begin(self, header: bytes) -> None:
        """Store the run with its header (no entries yet); its first epoch is ours."""
        self.epoch = await self.durable.store.start_run(self.scope, header)

    async def append(self, entry: bytes) -> None:
        """The next settled step's entry."""
        await self.durable.store.append_run(self.scope, self.epoch, self.seq, entry)
        self.seq += 1

    async def end(self, outcome: bytes) -> None:
        """How the run ended (its entries dropped unless the durable keeps them)."""
        await self.durable.store.finish_run(
            self.scope, self.epoch, outcome, drop_entries=self.durable.delete_on_complete
        )

    @classmethod
    def held(cls: type[J], durable: Durable, scope: Scope, record: RunRecord) -> J:
        """The journal of a stored run as it stands, not claimed (an ended run's)."""
        return cls(durable, scope, record.epoch, len(record.entries))

    @classmethod
    async def claim(cls: type[J], durable: Durable, scope: Scope, record: RunRecord) -> J:
        """Take the stored run over: the epoch goes up (an older writer is fenced off),
        and the entries go on after the stored ones."""
        epoch = await durable.store.claim_run(scope, record.epoch)
        return cls(durable, scope, epoch, len(record.entries))


async def load(durable: Durable, scope: Scope) -> RunRecord | None:
    """The stored run (header, entries, epoch, outcome), None if there is none."""
    return await durable.store.load_run(scope)


async def is_stored(durable: Durable, scope: Scope) -> bool:
    """Whether a run is stored under `scope`, open or ended."""
    return await durable.store.load_run(scope) is not None


def encoded(model: BaseModel, fallback: Callable[[Any], Any] | None = None) -> bytes:
    """A payload as the store keeps it: the model's JSON (`fallback` for the values
    pydantic cannot serialise)."""
    return model.__pydantic_serializer__.to_json(model, fallback=fallback)

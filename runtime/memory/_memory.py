"""What `memory=` on an agent is: a store and a save policy (`Memory`). The lower half
of the part: the sessions (`_sessions`) and the save policy (`save`) both take it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from raygent.stores import Store

__all__ = ["Memory", "SavePolicy"]

SavePolicy = Literal["message", "turn", "run"]


@dataclass(frozen=True)
class Memory:
    """A store and a save policy (default `message`)."""

    store: Store
    save_policy: SavePolicy = "message"

    def __post_init__(self) -> None:
        if self.save_policy not in ("message", "turn", "run"):
            raise ValueError(f"save_policy must be message, turn or run, not {self.save_policy!r}")

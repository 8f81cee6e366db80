"""The position fence: where in a session a run writes, for every kind of lease.

A lease (`LocalSessions`' in this process, a Ray session host's) starts a run at the
length of the history it loaded. Each batch the run appends is sent with that position
(`expected_position`): a writer that went around the lease finds the position moved and
the store refuses the batch (`PositionConflictError`), so the history never forks. A
batch stored before (a resumed run's replay: `duplicate`) leaves the fence where it is;
a committed compaction (`replace_prefix`) moves it by what the replacement changed, so
the run's next append still lines up.
"""

from __future__ import annotations

from collections.abc import Sequence

from raygent.stores import AppendResult, CompactingStore, Scope, Store

from ..messages import Message

__all__ = ["PositionFence"]


class PositionFence:
    """One run's writes to one session, at the position it knows (`position`)."""

    def __init__(self, store: Store, scope: Scope, run_id: str, position: int) -> None:
        self.store, self.scope, self.run_id = store, scope, run_id
        self.position = position

    async def append(self, turn: int, messages: Sequence[Message]) -> AppendResult:
        """Append at `position`; it then moves past the batch, unless the batch was a
        duplicate (stored before: it stays put)."""
        result = await self.store.append(
            self.scope, self.run_id, turn, messages, expected_position=self.position
        )
        if not result.duplicate:
            self.position = result.first_position + result.count
        return result

    async def replace_prefix(
        self, revision: int, count: int, replacement: Sequence[Message]
    ) -> bool:
        """Replace the stored prefix of `count` messages if `revision` still holds (False:
        a conflict); committed, the fence moves by what the replacement changed."""
        outcome = await self.compacting().replace_prefix(
            self.scope, revision, count, replacement, self.run_id
        )
        if outcome == "committed":
            self.position += len(replacement) - count
        return outcome == "committed"

    def compacting(self) -> CompactingStore:
        """The store, as a store that compacts (TypeError if it cannot)."""
        store = self.store
        if not isinstance(store, CompactingStore):  # a lease's `compacts` says so first
            raise TypeError(f"{type(store).__name__} cannot replace a prefix (compaction)")
        return store

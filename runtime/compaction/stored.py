"""Compaction of a session's stored history, under the run's lease.

The run's conversation holds the stored history from some offset (after the agent's
system prompt); what the store holds beyond that is the part of this run the save
policy has already written. A slice inside that stored part is replaced in the store
too (`replace_prefix` of the prefix ending with the slice, the head before it written
back unchanged); a slice outside it is only in the run, and reaches the store as the
save policy writes it. A slice across the boundary is never chosen (it is a cut).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..messages import Message
from ..redaction import logger as redacting_logger

if TYPE_CHECKING:
    from raygent.stores.protocol import Snapshot

    from ..memory.save import RunSaver

__all__ = ["MAX_ATTEMPTS", "StoredView", "stored_view"]

log = redacting_logger("raygent.compaction")

MAX_ATTEMPTS = 5  # replace_prefix tries before the store is left as it is


@runtime_checkable
class CompactingLease(Protocol):
    """A session lease that can compact the stored history (the local one and the Ray
    one, through its session host, can)."""

    compacts: bool

    async def snapshot(self) -> Snapshot: ...

    async def replace_prefix(
        self, revision: int, count: int, replacement: Sequence[Message]
    ) -> bool: ...


@dataclass
class StoredView:
    """Where the stored history sits in the run's conversation, as of `snapshot`."""

    lease: CompactingLease
    snapshot: Snapshot
    offset: int  # the conversation index of stored position 0
    matched: int  # how many stored messages the conversation holds in order from there

    @property
    def cuts(self) -> tuple[int, int]:
        """Where a slice may not cross: the start and the end of the stored part."""
        return self.offset, self.offset + self.matched

    async def replace(self, start: int, end: int, compacted: Sequence[Message]) -> tuple[bool, int]:
        """Replace the stored copy of `conversation[start:end]` by the summary, given as
        `compacted` (the conversation from `start` on, once compacted), retrying when
        another writer moved the revision but left the prefix as it was. Stored turns
        after the slice that compaction marked are rewritten marked.
        Returns (stored, conflicts met)."""
        if start < self.offset or end > self.offset + self.matched:
            return False, 0  # not stored yet: the save policy writes the compacted run
        after = self.snapshot.messages[end - self.offset : self.matched]
        changed = [k for k, m in enumerate(after) if compacted[1 + k] != m]
        rewritten = changed[-1] + 1 if changed else 0
        count = end - self.offset + rewritten
        replaced = self.snapshot.messages[:count]
        replacement = [
            *self.snapshot.messages[: start - self.offset],
            *compacted[: 1 + rewritten],
        ]
        snapshot, conflicts = self.snapshot, 0
        try:
            for _ in range(MAX_ATTEMPTS):
                if await self.lease.replace_prefix(snapshot.revision, count, replacement):
                    return True, conflicts
                conflicts += 1
                snapshot = await self.lease.snapshot()
                if snapshot.messages[:count] != replaced:
                    return False, conflicts  # the stored prefix itself changed: leave it
        except Exception as exc:
            # The stored history stays whole (still a valid history); the run compacts.
            log.warning("compacting the stored history failed: %r", exc)
        return False, conflicts


async def stored_view(saver: RunSaver | None, conversation: Sequence[Message]) -> StoredView | None:
    """The stored part of the conversation, when the session's lease can compact it."""
    lease: object = saver.lease if saver is not None else None
    # A lease whose store cannot replace a prefix does not compact: the run does alone.
    if not isinstance(lease, CompactingLease) or not lease.compacts:
        return None
    try:
        snapshot = await lease.snapshot()
    except Exception as exc:
        log.warning("reading the stored history to compact it failed: %r", exc)
        return None  # the run compacts alone; the stored history stays whole
    offset, matched = _placed(conversation, snapshot.messages)
    return StoredView(lease, snapshot, offset, matched)


def _placed(conversation: Sequence[Message], stored: Sequence[Message]) -> tuple[int, int]:
    """(offset, matched): stored history goes after the leading system messages (see
    RunState.insert_history); it may itself start with system messages."""
    lead = 0
    while lead < len(conversation) and conversation[lead].role == "system":
        lead += 1
    best = (lead, 0)
    for offset in range(lead, -1, -1):
        matched = 0
        limit = min(len(stored), len(conversation) - offset)
        while matched < limit and conversation[offset + matched] == stored[matched]:
            matched += 1
        if matched > best[1]:
            best = (offset, matched)
    return best

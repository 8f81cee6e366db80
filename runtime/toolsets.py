"""Toolsets: tools known only once connected (an MCP server's), resolved at a run's start.

An agent keeps the toolsets of its `tools=` apart from its plain tools and asks each for
its tools when a run starts (in the run's own task, under its abort signal). A toolset
caches its list: asking is cheap after the first run.
"""

from __future__ import annotations

import contextlib
import contextvars
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from .redaction import logger
from .tools import Tool

__all__ = ["Toolset", "close_toolsets", "connected", "owning_toolsets"]

log = logger(__name__)

_owner: contextvars.ContextVar[list[Toolset] | None] = contextvars.ContextVar(
    "raygent_toolset_owner", default=None
)


class Toolset(ABC):
    """Several tools whose list comes from elsewhere; put one in an agent's `tools=`."""

    @abstractmethod
    async def tools(self) -> Sequence[Tool[..., Any]]:
        """The tools as of now (cached by the toolset; connects on first use)."""

    async def aclose(self) -> None:  # noqa: B027 (a toolset with nothing open closes nothing)
        """Close what this event loop holds open for the toolset (a server, a session);
        the next use opens it again."""


@contextlib.contextmanager
def owning_toolsets() -> Iterator[list[Toolset]]:
    """Collect the toolsets that connect inside the block, in the tasks started in it
    too: whoever runs work for a job that ends (a Ray batch runner, for one batch) closes
    them when it ends (`close_toolsets`), so no server outlives the job that opened it."""
    opened: list[Toolset] = []
    token = _owner.set(opened)
    try:
        yield opened
    finally:
        _owner.reset(token)


def connected(toolset: Toolset) -> None:
    """A toolset opened a connection in this context: its owner, if any, closes it."""
    opened = _owner.get()
    if opened is not None and all(t is not toolset for t in opened):
        opened.append(toolset)


async def close_toolsets(toolsets: Iterable[Toolset]) -> None:
    """Close each toolset's connection of this event loop; a failure is logged, never
    raised (closing is the last thing a job does)."""
    for toolset in toolsets:
        try:
            await toolset.aclose()
        except Exception as exc:
            log.warning("closing %r failed: %r", toolset, exc)

"""Toolsets: tools known only once connected (an MCP server's), resolved at a run's start.

An agent keeps the toolsets of its `tools=` apart from its plain tools and asks each for
its tools when a run starts (in the run's own task, under its abort signal). A toolset
caches its list: asking is cheap after the first run.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from .tools import Tool

__all__ = ["Toolset"]


class Toolset(ABC):
    """Several tools whose list comes from elsewhere; put one in an agent's `tools=`."""

    @abstractmethod
    async def tools(self) -> Sequence[Tool[..., Any]]:
        """The tools as of now (cached by the toolset; connects on first use)."""

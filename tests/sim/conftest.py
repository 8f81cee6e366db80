"""Fixtures for the simulator tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sim_helpers import Clients


@pytest.fixture
async def clients() -> AsyncIterator[Clients]:
    """SDK and httpx clients for a simulator, closed at teardown."""
    made = Clients()
    yield made
    await made.aclose()

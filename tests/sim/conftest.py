"""Fixtures for the simulator tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from bedrock_helpers import Boto
from gemini_sdk import close_all
from sim_helpers import Clients


@pytest.fixture
async def clients() -> AsyncIterator[Clients]:
    """SDK and httpx clients for a simulator, closed at teardown."""
    made = Clients()
    yield made
    await made.aclose()


@pytest.fixture
def boto() -> Iterator[Boto]:
    """boto3 clients for the simulator's Bedrock wire and moto's S3, closed at teardown."""
    made = Boto()
    yield made
    made.close()


@pytest.fixture(autouse=True)
def _close_gemini_clients() -> Iterator[None]:
    """The google-genai clients a test made, closed after it."""
    yield
    close_all()

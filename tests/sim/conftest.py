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


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[str]:
    """moto's server (S3 for Bedrock's batch jobs), started once per session: its URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


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

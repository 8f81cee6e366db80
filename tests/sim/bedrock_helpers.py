"""boto3 clients for the simulator's Bedrock wire (and moto's S3), with the simulator's
known test credentials, so the simulator verifies every signature."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config

from raygent.sim import Simulator
from raygent.sim._bedrock_auth import TEST_CREDENTIALS, AwsTestCredentials

REGION = "us-east-1"
CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
NO_RETRIES = Config(retries={"total_max_attempts": 1, "mode": "standard"})


class Boto:
    """boto3 clients, each closed at teardown (their connection pools included)."""

    def __init__(self) -> None:
        self._open: list[Any] = []

    def client(self, service: str, url: str, creds: AwsTestCredentials = TEST_CREDENTIALS) -> Any:
        made = boto3.client(
            service,
            region_name=REGION,
            endpoint_url=url,
            aws_access_key_id=creds.access_key,
            aws_secret_access_key=creds.secret_key,
            aws_session_token=creds.session_token,
            config=NO_RETRIES,
        )
        self._open.append(made)
        return made

    def runtime(self, sim: Simulator, creds: AwsTestCredentials = TEST_CREDENTIALS) -> Any:
        return self.client("bedrock-runtime", sim.url, creds)

    def close(self) -> None:
        for made in self._open:
            made.close()


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"text": text}]}]


def events(stream: Any) -> list[dict[str, Any]]:
    """A ConverseStream reply's events, parsed by botocore's own event-stream parser."""
    return list(stream["stream"])
